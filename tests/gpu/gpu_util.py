"""Helpers of the GPU parity tests: why the GPU tests skip, exact comparison, host/device copies.

Import `skip_module_without_gpu()` at the top of a test module before importing cupy.
"""

import numpy as np
import pytest

from fd_mtp.testing.asserts import assert_exact


def gpu_skip_reason():
    """None when CuPy, a CUDA device and the fd_mtp_cuda module are all usable, else why not."""
    try:
        import cupy
    except Exception as exc:  # ImportError, or a CuPy built for another CUDA
        return f"cupy is not importable ({exc})"
    try:
        if cupy.cuda.runtime.getDeviceCount() < 1:
            return "no CUDA device"
    except Exception as exc:
        return f"no usable CUDA device ({exc})"
    try:
        import fd_mtp.cuda

        fd_mtp.cuda.load()
    except ImportError as exc:
        return str(exc)
    return None


def skip_module_without_gpu():
    """Skip the calling test module (never fail it) when CuPy, a GPU or fd_mtp_cuda is missing."""
    reason = gpu_skip_reason()
    if reason is not None:
        pytest.skip(f"GPU parity tests skipped: {reason}", allow_module_level=True)


def on_simt():
    """True when the tests run on the simt CPU emulator (FD_MTP_SIMT=1, see conftest.py)."""
    import cupy

    return getattr(cupy, "SIMT_STANDIN", False)


def split(args, host_side=()):
    """(numpy copies, device copies) of a dict of arrays; host-only entries (not_need_stop, and
    those named in ``host_side``) stay numpy."""
    host = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in args.items()}
    dev = {}
    for k, v in args.items():
        if k == "not_need_stop" or k in host_side or not isinstance(v, np.ndarray):
            dev[k] = v.copy() if isinstance(v, np.ndarray) else v
        else:
            dev[k] = _cp().asarray(v)
    return host, dev


def compare_all(dev, host, names):
    for k in names:
        v = dev[k]
        got = _cp().asnumpy(v) if isinstance(v, _cp().ndarray) else v
        assert_exact(got, host[k], k)


def arrays_of(args):
    return [k for k, v in args.items() if isinstance(v, np.ndarray)]


def call(fn, args, order, **kw):
    return fn(*[args[k] for k in order], **kw)


def assert_parity(op_name, args, order, *, skip_if_refused=False, host_side=(), **kw):
    """``fd_mtp.reference.<op_name>`` on numpy copies of ``args`` (a dict, passed in ``order``, with
    keywords ``kw``) and ``fd_mtp.cuda.<op_name>`` on device copies leave every array equal.
    ``skip_if_refused``: a batch the reference refuses (a random batch out of blocks with nothing
    to preempt; the bad-input tests cover that) skips the test. ``host_side``: arrays the kernel
    reads on the host, passed as numpy (see `split`). Returns (host, dev)."""
    from fd_mtp import cuda as fcuda
    from fd_mtp import reference as ref

    host, dev = split(args, host_side)
    try:
        call(getattr(ref, op_name), host, order, **kw)
    except ValueError:
        if not skip_if_refused:
            raise
        pytest.skip("random batch has no valid outcome (out of blocks)")
    call(getattr(fcuda, op_name), dev, order, **kw)
    compare_all(dev, host, arrays_of(args))
    return host, dev


def assert_refused(op_name, args, order, pattern, **kw):
    """``fd_mtp.cuda.<op_name>`` on device copies of ``args`` (and of the arrays in ``kw``)
    raises ValueError matching ``pattern`` and writes nothing: every array of ``args`` equals
    its copy taken before."""
    from fd_mtp import cuda as fcuda

    host, dev = split(args)
    dev_kw = {k: _to_device(v) for k, v in kw.items()}
    with pytest.raises(ValueError, match=pattern):
        call(getattr(fcuda, op_name), dev, order, **dev_kw)
    compare_all(dev, host, arrays_of(args))


def assert_refused_at(op_name, args, order, argument, b, **kw):
    """`assert_refused` with the message of a per-request check: ``<op>: <argument> (request
    <b>)``."""
    assert_refused(op_name, args, order, rf"{op_name}: {argument} \(request {b}\)", **kw)


def bad_set_value(batch=8):
    """speculate_set_value_by_flags_and_idx (fd_mtp.testing.op_inputs' batch) with accept_num out
    of range for requests 260 (when the batch has it), 5 and 2 (2 is named, on the CPU and on the
    GPU); returns (case, the numpy reference's message)."""
    from fd_mtp import reference as ref
    from fd_mtp.testing import op_inputs

    case = op_inputs.build_set_value(batch)
    a = dict(zip(case.names, case.args))
    a["stop_flags"][:] = False
    a["seq_lens_encoder"][:] = 0
    a["seq_lens_this_time"][:] = np.maximum(a["seq_lens_this_time"], 1)
    for b in (260, 5, 2):  # 260: in the second block of threads when batch > 256
        if b < batch:
            a["accept_num"][b] = 1000
    with pytest.raises(ValueError) as info:
        ref.speculate_set_value_by_flags_and_idx(*[np.copy(x) for x in case.args])
    return case, str(info.value)


def poison_stream(mode="deferred"):
    """Runs `bad_set_value`'s batch through fd_mtp.cuda in error ``mode``: in deferred (or record)
    mode the stream is poisoned. Returns the message the op's error carries."""
    from fd_mtp import cuda as fcuda
    from fd_mtp.testing.gpu_step import device_args

    case, message = bad_set_value()
    assert message.startswith("speculate_set_value_by_flags_and_idx: accept_num")
    with fcuda.errors(mode):
        fcuda.speculate_set_value_by_flags_and_idx(
            *device_args("speculate_set_value_by_flags_and_idx", case)[0]
        )
    return message


def _cp():
    import cupy

    return cupy


def _to_device(x, host_side=False):
    """A device copy of a numpy array (a numpy copy when ``host_side``); other values as they are."""
    if not isinstance(x, np.ndarray):
        return x
    return x.copy() if host_side else _cp().asarray(x)


def run_case(op_name, case):
    """Parity of ``fd_mtp.cuda.<op_name>`` with ``fd_mtp.reference.<op_name>`` on a valid batch of
    fd_mtp.testing.op_inputs (a ``Case``): the reference runs on numpy copies, the kernel on
    device copies (the schema's CPU tensors, e.g. not_need_stop, stay numpy); every array
    argument (written or read-only) and every returned array must match exactly."""
    from fd_mtp import cuda as fcuda
    from fd_mtp import reference as ref
    from fd_mtp import schema

    try:
        cpu = {t.name for t in schema.get(op_name).tensors if t.cpu}
    except KeyError:  # pre_process is no schema op; all its arrays live on the device
        cpu = set()
    host = [a.copy() if isinstance(a, np.ndarray) else a for a in case.args]
    dev = [_to_device(a, n in cpu) for a, n in zip(case.args, case.names)]
    host_kw = {k: v.copy() if isinstance(v, np.ndarray) else v for k, v in case.kwargs.items()}
    dev_kw = {k: _to_device(v) for k, v in case.kwargs.items()}
    expected = getattr(ref, op_name)(*host, **host_kw)
    got = getattr(fcuda, op_name)(*dev, **dev_kw)
    if case.returns:
        if not isinstance(expected, (tuple, list)):
            expected, got = [expected], [got]
        assert len(got) == len(expected), f"{op_name}: {len(got)} outputs, expected {len(expected)}"
        for i, (g, e) in enumerate(zip(got, expected)):
            if e is None:
                assert g is None, f"{op_name} output {i}: expected None"
            else:
                assert_exact(_host(g), np.asarray(e), f"{op_name} output {i}")
    for name, d, h in zip(case.names, dev, host):
        if isinstance(h, np.ndarray):
            assert_exact(_host(d), h, f"{op_name}: {name}")


def _host(x):
    return _cp().asnumpy(x) if isinstance(x, _cp().ndarray) else np.asarray(x)
