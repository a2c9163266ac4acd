"""Ops without a status of their own skip on a poisoned stream (docs/gpu_errors.md, issue 20 §2).

An op that fails in deferred mode poisons its stream: every later op on it must write nothing
until the host reads the error. The ops with data checks skip through their status (the record's
preset, kept by ``reset_status``); here the four that had no such path:

* ``draft_model_postprocess``, ``speculate_clear_accept_nums``, ``speculate_get_seq_lens_output``
  have no status: their kernels read the stream's preset status and return when it is poisoned;
* ``speculate_calcu_accept_ratio`` checks and applies in one commit: its kernel returns when its
  status is already nonzero on entry (the poisoned preset).

For each: poison the stream with a bad ``speculate_set_value_by_flags_and_idx`` (deferred), run
the op on a batch it would change, check every array bitwise untouched, check that
``check_pending`` raises the original op's error, then that the op runs again and matches the
numpy reference.

Needs CuPy, a CUDA GPU (or FD_MTP_SIMT=1) and the fd_mtp_cuda module.
"""

import numpy as np
import pytest
from gpu_util import poison_stream, skip_module_without_gpu

skip_module_without_gpu()

import cupy as cp  # noqa: E402

import fd_mtp.cuda as fcuda  # noqa: E402
from fd_mtp import reference as ref  # noqa: E402
from fd_mtp.cuda import _common  # noqa: E402
from fd_mtp.testing import op_inputs  # noqa: E402

BUILDERS = {
    "draft_model_postprocess": op_inputs.build_postprocess,
    "speculate_clear_accept_nums": op_inputs.build_clear_accept_nums,
    "speculate_get_seq_lens_output": op_inputs.build_seq_lens_output,
    "speculate_calcu_accept_ratio": op_inputs.build_calcu_accept_ratio,
}
SENTINEL = -7  # the output of speculate_get_seq_lens_output before the op (counts are >= 0)


pytestmark = pytest.mark.usefixtures("clean_stream")  # conftest.py: nothing pending around a test


def run_device(name, dev):
    """Runs op ``name`` on the device arrays ``dev`` (a dict, argument order). The returned
    output of speculate_get_seq_lens_output goes to ``dev["seq_lens_output"]`` (filled with
    SENTINEL by `device_args`) through the raw binding: the wrapper's own output is a new array,
    so "untouched" is only observable on an array the caller owns."""
    if name != "speculate_get_seq_lens_output":
        getattr(fcuda, name)(*[v for k, v in dev.items()])
        return
    args = {k: v for k, v in dev.items() if k != "seq_lens_output"}
    _, _, _, p = _common.prepare(name, args)
    p.seq_lens_output = dev["seq_lens_output"].data.ptr
    _common.load().speculate_get_seq_lens_output(p, _common._stream())


def device_args(name, case):
    dev = {n: cp.asarray(a) for n, a in zip(case.names, case.args)}
    if name == "speculate_get_seq_lens_output":
        batch = case.args[0].shape[0]
        dev["seq_lens_output"] = cp.full(batch, SENTINEL, dtype=cp.int32)
    return dev


def expected_arrays(name, case):
    """The arrays after the op, by the numpy reference (in place, or the returned output)."""
    host = [np.copy(a) for a in case.args]
    out = getattr(ref, name)(*host)
    expected = dict(zip(case.names, host))
    if name == "speculate_get_seq_lens_output":
        expected["seq_lens_output"] = np.asarray(out)
    return expected


@pytest.mark.parametrize("batch", [7, 33, 257])
@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_op_writes_nothing_on_a_poisoned_stream(name, batch):
    case = BUILDERS[name](batch)
    expected = expected_arrays(name, case)
    dev = device_args(name, case)
    before = {k: cp.asnumpy(v) for k, v in dev.items()}
    # the op changes this batch when it runs: "untouched" below is not vacuous
    assert any(not np.array_equal(before[k], expected[k]) for k in expected), name

    message = poison_stream()
    with fcuda.errors("deferred"):
        run_device(name, dev)
        for k, v in dev.items():
            np.testing.assert_array_equal(
                cp.asnumpy(v), before[k], err_msg=f"{name}: {k} written on a poisoned stream"
            )
        with pytest.raises(ValueError) as info:
            fcuda.check_pending()
        assert str(info.value) == message  # the original op's error, not this op's
        # the error was read: the stream runs the op again
        run_device(name, dev)
        fcuda.check_pending()
    for k, v in expected.items():
        np.testing.assert_array_equal(cp.asnumpy(dev[k]), v, err_msg=f"{name}: {k}")


@pytest.mark.parametrize("name", sorted(BUILDERS))
def test_poison_is_skipped_in_record_mode_too(name):
    """Record mode (graph capture) never raises; the op still skips, and `pending` names the
    original op."""
    case = BUILDERS[name](33)
    dev = device_args(name, case)
    before = {k: cp.asnumpy(v) for k, v in dev.items()}
    message = poison_stream()
    with fcuda.errors("record"):
        run_device(name, dev)
        for k, v in dev.items():
            np.testing.assert_array_equal(cp.asnumpy(v), before[k], err_msg=f"{name}: {k}")
        assert fcuda.pending() == ("speculate_set_value_by_flags_and_idx", message)
        assert fcuda.pending() is None


def test_accept_ratio_overflow_still_reports_on_a_clean_stream():
    """The skip on entry is for the poisoned preset only: on a clean stream the op's own check
    (a total past int32) still reports, and writes nothing."""
    case = op_inputs.build_calcu_accept_ratio(33)
    case.args[0][0] = np.iinfo(np.int32).max  # sum_draft_num: any draft overflows it
    with pytest.raises(ValueError) as info:
        ref.speculate_calcu_accept_ratio(*[np.copy(a) for a in case.args])
    dev = device_args("speculate_calcu_accept_ratio", case)
    before = {k: cp.asnumpy(v) for k, v in dev.items()}
    with fcuda.errors("deferred"):
        run_device("speculate_calcu_accept_ratio", dev)
        with pytest.raises(ValueError) as got:
            fcuda.check_pending()
    assert str(got.value) == str(info.value)
    for k, v in dev.items():
        np.testing.assert_array_equal(cp.asnumpy(v), before[k], err_msg=k)
