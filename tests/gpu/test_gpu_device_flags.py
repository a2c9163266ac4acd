"""not_need_stop computed on the device (docs/gpu_errors.md, issue 20 §2).

The four ops with a ``flag`` (draft_model_preprocess, draft_model_update, speculate_update,
speculate_schedule_cache) compute it after the op with one generic kernel (stream_status.cu:
stream_flag) from the op's device count, in the device form of the schema's expression
(fd_mtp.schema.device_flag): ``count + <host-known int> <cmp> <stop_nums on the device |
host-known int>``. With a CuPy bool[1] ``not_need_stop`` the op does not synchronise; with a host
numpy bool[1] (FastDeploy's contract) the flag word comes back with the stream's record.

* parity: on valid batches (sizes 1, 7, 33, 99, 257; running, all stopped, and a padded
  ``stop_flags`` for the ops whose flag counts the slots past the batch; a random stop_nums), the
  device flag, the host flag and the numpy reference agree, and so does every other array; a
  sweep of stop_nums over the comparison's boundary;
* no sync: a call with a device flag after warm-up makes no wait, no sync call, no host read, no
  cudaMalloc and no array allocation (counted by the simt emulator);
* a skipped op (poisoned stream) or a failed one (bad data) leaves the device flag unchanged;
* the device form: the four schema expressions, the refusal of others at generation time.

Needs CuPy, a CUDA GPU (or FD_MTP_SIMT=1) and the fd_mtp_cuda module.
"""

import dataclasses
import importlib.util
import pathlib

import numpy as np
import pytest
from gpu_util import on_simt, poison_stream, skip_module_without_gpu

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp import schema  # noqa: E402
from fd_mtp.testing import op_inputs  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[2]
BUILDERS = {
    "draft_model_preprocess": op_inputs.build_preprocess,
    "draft_model_update": op_inputs.build_update,
    "speculate_update": op_inputs.build_speculate_update,
    "speculate_schedule_cache": op_inputs.build_schedule_cache,
}
READS_STOP_NUMS = ("speculate_update", "speculate_schedule_cache")
BATCHES = (1, 7, 33, 99, 257)
PAD = np.array([False, True, False])  # slots past the running batch (max_bsz - bsz = 3)


pytestmark = pytest.mark.usefixtures("clean_stream")  # conftest.py: nothing pending around a test


def make_case(name, batch, variant="running", stop_nums=None):
    """(names, args, kwargs) of a valid batch of op ``name``. ``variant``: ``running`` (the
    builder's batch), ``stopped`` (every request stopped: the flag's other value), ``padded``
    (stop_flags longer than the batch). ``stop_nums``: its value (ops that read it)."""
    case = BUILDERS[name](batch)
    names, args = list(case.names), list(case.args)
    d = dict(zip(names, args))
    if variant == "stopped":
        for k in ("stop_flags", "base_model_stop_flags"):
            if k in d:
                d[k][:] = True
    elif variant == "padded":
        s = d["stop_flags"]
        args[names.index("stop_flags")] = np.concatenate([s.reshape(-1), PAD]).reshape(
            (-1,) + s.shape[1:]
        )
    if stop_nums is not None:
        d["stop_nums"][0] = stop_nums
    return names, args, dict(case.kwargs)


def reference(name, names, args, kwargs):
    host = [np.copy(a) if isinstance(a, np.ndarray) else a for a in args]
    getattr(ref, name)(*host, **kwargs)
    return dict(zip(names, host))


def run_device(name, names, args, kwargs, flag, stop_nums_on_device=True):
    """Runs fd_mtp.cuda.<name> on device copies; ``flag``: the not_need_stop to pass (numpy or
    CuPy). Returns the device arguments by name."""
    dev = {}
    for n, a in zip(names, args):
        if n == "not_need_stop":
            dev[n] = flag
        elif n == "stop_nums" and not stop_nums_on_device:
            dev[n] = np.copy(a)
        else:
            dev[n] = cp.asarray(a) if isinstance(a, np.ndarray) else a
    getattr(fcuda, name)(*dev.values(), **kwargs)
    return dev


def host(x):
    return cp.asnumpy(x) if isinstance(x, cp.ndarray) else np.asarray(x)


def assert_matches(name, dev, expected, what):
    for n, e in expected.items():
        if isinstance(e, np.ndarray):
            np.testing.assert_array_equal(host(dev[n]), e, err_msg=f"{name} ({what}): {n}")


def parity_params():
    out = []
    for name in sorted(BUILDERS):
        variants = ["running", "stopped"] + (["padded"] if name in READS_STOP_NUMS else [])
        out += [(name, b, v) for b in BATCHES for v in variants]
    return out


@pytest.mark.parametrize("name,batch,variant", parity_params())
def test_device_flag_matches_host_flag_and_reference(name, batch, variant):
    rng = np.random.default_rng(batch * 7 + len(variant))
    stop_nums = int(rng.integers(0, batch + 5)) if name in READS_STOP_NUMS else None
    names, args, kwargs = make_case(name, batch, variant, stop_nums)
    expected = reference(name, names, args, kwargs)
    want = bool(expected["not_need_stop"][0])
    if variant == "stopped" and name != "speculate_update":
        assert not want  # the flag's other value is covered
    with fcuda.errors("deferred"):
        # host numpy flag (synchronises), starting at the other value: it must be written
        dev = run_device(name, names, args, kwargs, np.array([not want]))
        assert_matches(name, dev, expected, "host flag")
        # CuPy flag, stop_nums on the device, then on the host (a host-known bound)
        for on_device in (True, False) if stop_nums is not None else (True,):
            flag = cp.asarray(np.array([not want]))
            dev = run_device(name, names, args, kwargs, flag, on_device)
            fcuda.check_pending()
            assert bool(host(flag)[0]) is want, (name, on_device)
            assert_matches(name, dev, expected, f"device flag, stop_nums on device={on_device}")


@pytest.mark.parametrize("name", READS_STOP_NUMS)
def test_stop_nums_sweep_over_the_boundary(name):
    """count + (max_bsz - bsz) < stop_nums at every stop_nums around the threshold (padded
    stop_flags: the offset is 3 for speculate_schedule_cache, 0 for speculate_update)."""
    seen = set()
    for stop_nums in range(0, 14):
        names, args, kwargs = make_case(name, 7, "padded", stop_nums)
        want = bool(reference(name, names, args, kwargs)["not_need_stop"][0])
        seen.add(want)
        flag = cp.asarray(np.array([not want]))
        with fcuda.errors("deferred"):
            run_device(name, names, args, kwargs, flag)
            fcuda.check_pending()
        assert bool(host(flag)[0]) is want, stop_nums
    assert seen == {False, True}


@pytest.mark.skipif(not on_simt(), reason="counted by the simt emulator")
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_device_flag_call_does_not_sync_or_allocate(name):
    import simt_counters

    names, args, kwargs = make_case(name, 33, stop_nums=20 if name in READS_STOP_NUMS else None)
    expected = reference(name, names, args, kwargs)
    want = bool(expected["not_need_stop"][0])
    with fcuda.errors("deferred"):
        run_device(name, names, args, kwargs, cp.zeros(1, dtype=cp.bool_))  # warm-up
        fcuda.check_pending()
        flag = cp.asarray(np.array([not want]))
        dev = {
            n: (flag if n == "not_need_stop" else cp.asarray(a) if isinstance(a, np.ndarray) else a)
            for n, a in zip(names, args)
        }
        fn = getattr(fcuda, name)
        before = simt_counters.snapshot()
        fn(*dev.values(), **kwargs)
        used = simt_counters.since(before)
        fcuda.check_pending()
    for key in ("waits", "sync_calls", "host_reads", "mallocs", "array_allocations"):
        assert used[key] == 0, (name, used)
    assert used["launches"] >= 3, used  # begin, the op, the flag (and the commit)
    assert bool(host(flag)[0]) is want
    assert_matches(name, dev, expected, "no sync")


@pytest.mark.parametrize("start", [False, True])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_skipped_op_leaves_the_device_flag_unchanged(name, start):
    names, args, kwargs = make_case(name, 33, stop_nums=20 if name in READS_STOP_NUMS else None)
    expected = reference(name, names, args, kwargs)
    message = poison_stream()
    with fcuda.errors("deferred"):
        flag = cp.asarray(np.array([start]))
        dev = run_device(name, names, args, kwargs, flag)  # no sync: no raise here
        assert bool(host(flag)[0]) is start
        before = dict(zip(names, args))
        assert_matches(name, dev, {n: v for n, v in before.items() if n != "not_need_stop"}, "")
        with pytest.raises(ValueError) as info:
            fcuda.check_pending()
        assert str(info.value) == message  # the original op's error
        dev = run_device(name, names, args, kwargs, flag)  # the stream runs ops again
        fcuda.check_pending()
    assert_matches(name, dev, expected, "after the error was read")


@pytest.mark.parametrize("start", [False, True])
def test_failed_op_leaves_the_device_flag_unchanged(start):
    """speculate_update with accept_num out of range: its own error, nothing written, the flag
    kept; in checked mode the same error raises at the op."""
    names, args, kwargs = make_case("speculate_update", 8, stop_nums=0)
    d = dict(zip(names, args))
    running = np.flatnonzero(~d["stop_flags"].reshape(-1) & ~d["is_block_step"].reshape(-1))
    d["accept_num"].reshape(-1)[running[0]] = 1000
    with pytest.raises(ValueError) as info:
        reference("speculate_update", names, args, kwargs)
    for mode in ("deferred", "checked"):
        with fcuda.errors(mode):
            flag = cp.asarray(np.array([start]))
            if mode == "checked":
                with pytest.raises(ValueError) as got:
                    dev = run_device("speculate_update", names, args, kwargs, flag)
            else:
                dev = run_device("speculate_update", names, args, kwargs, flag)
                with pytest.raises(ValueError) as got:
                    fcuda.check_pending()
        assert str(got.value) == str(info.value), mode
        assert bool(host(flag)[0]) is start, mode
    assert_matches(
        "speculate_update", dev, {n: v for n, v in d.items() if n != "not_need_stop"}, ""
    )


def test_the_schema_flags_have_a_device_form():
    forms = {n: schema.device_flag(schema.get(n)) for n in BUILDERS}
    assert forms == {
        "draft_model_preprocess": schema.DeviceFlag("0", ">", None, "0"),
        "draft_model_update": schema.DeviceFlag("0", "<", None, "dims.B"),
        "speculate_update": schema.DeviceFlag("0", "<", "stop_nums", None),
        "speculate_schedule_cache": schema.DeviceFlag("p.max_bsz - p.bsz", "<", "stop_nums", None),
    }
    every = {op.name for op in schema.all_ops().values() if op.flag is not None}
    assert every == set(BUILDERS)


def _gen_ops():
    spec = importlib.util.spec_from_file_location("gen_ops", ROOT / "cmake" / "gen_ops.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize(
    "expr",
    [
        "count * 2 < dims.B",  # the count scaled
        "count < host.stop_nums + 1",  # arithmetic on a device value
        "count + host.stop_nums < 4",  # a device value in the offset
        "count > 0 and count < dims.B",  # two comparisons
        "count < dims.B < 9",  # a chained comparison
        "count < host.nothing",  # not a tensor of the op
        "count < len(dims)",  # a call
        "dims.B > count",  # count on the right
    ],
)
def test_generation_refuses_a_flag_without_device_form(expr):
    op = dataclasses.replace(schema.get("speculate_update"), flag=("not_need_stop", expr))
    with pytest.raises(ValueError, match="speculate_update: flag expression .* no device form"):
        schema.device_flag(op)
    with pytest.raises(ValueError, match="no device form"):
        _gen_ops().gen_cuda_launchers([op])


def test_wrapper_docstrings_say_a_cupy_flag_does_not_sync():
    for name in BUILDERS:
        doc = getattr(fcuda, name).__doc__
        assert "not_need_stop: host numpy bool[1]" in doc, name
        assert "CuPy bool[1] (set on the device by the stream: no sync)" in doc, name
