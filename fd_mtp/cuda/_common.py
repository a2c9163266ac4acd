"""Shared helpers of fd_mtp.cuda: loading the compiled module, CuPy, argument checks that
mirror custom_ops/paddle/check.h, kernel-status decoding, scratch buffers and the error model
(docs/gpu_errors.md: error modes, ``pending`` / ``check_pending``)."""

from __future__ import annotations

import contextlib
import functools
import importlib
import importlib.util
import os
import sys
import threading

import numpy as np

from ..schema import CallCounter

MODULE_DIR_ENV = "FD_MTP_CUDA_MODULE_DIR"
BUILD_HINT = (
    "build it with `make cuda-module` (or `python cmake/fd_mtp_build.py cuda-module`, which needs "
    "no paddle) from the fd_mtp checkout (output: fd_mtp/_lib), or point "
    f"{MODULE_DIR_ENV} at the directory holding an fd_mtp_cuda*.so"
)

ERROR_MODES = ("deferred", "checked", "record")


@functools.cache
def load():
    """Import and return the compiled ``fd_mtp_cuda`` module (ImportError with a hint if absent)."""
    from .. import envs

    directory = envs.get(MODULE_DIR_ENV)
    try:
        if directory:
            if not os.path.isdir(directory):
                raise ImportError(f"{MODULE_DIR_ENV}={directory!r} is not a directory")
            sys.path.insert(0, directory)
            try:
                return importlib.import_module("fd_mtp_cuda")
            finally:
                sys.path.remove(directory)
        return importlib.import_module("fd_mtp._lib.fd_mtp_cuda")
    except ImportError as exc:
        raise ImportError(
            f"fd_mtp.cuda cannot load the CUDA module fd_mtp_cuda ({exc}); {BUILD_HINT}"
        ) from exc


def _cupy():
    try:
        import cupy
    except ImportError as exc:
        raise ImportError(f"fd_mtp.cuda needs CuPy ({exc})") from exc
    return cupy


# ------------------------------------------------------------------------------------------
# Argument checks (mirror custom_ops/paddle/check.h)
# ------------------------------------------------------------------------------------------
def _fail(op, arg, msg):
    raise ValueError(f"{op}: {arg} {msg}")


def _device_array(op, arg, a):
    cp = _cupy()
    if not isinstance(a, cp.ndarray):
        _fail(op, arg, f"must be a cupy.ndarray, got {type(a).__name__}")
    if not a.flags.c_contiguous:
        _fail(op, arg, "must be C-contiguous")
    return a


def _dtype(op, arg, a, dt):
    _device_array(op, arg, a)
    if a.dtype != np.dtype(dt):
        _fail(op, arg, f"must be {np.dtype(dt)}, got {a.dtype}")


def _set_flag(a, value):
    a.reshape(-1)[0] = bool(value)  # a view of a C-contiguous array: writes land in `a`


def _ptr(a):
    return a.data.ptr


_workspaces: dict = {}
_workspace_lock = threading.Lock()
# Workspace keys (fd_mtp.schema.Workspace.key) `launch` leaves null: tests of a launcher's path
# without one (a kernel that takes a null workspace, e.g. verify_sample_tokens).
NULL_WORKSPACES: set = set()
# fd_mtp.cuda's call counters (the default RNG position of an op: fd_mtp.schema.prepare_call).
CALLS = CallCounter()


def _workspace(key, shape, dtype):
    """A C-contiguous device array of ``shape`` / ``dtype`` for op workspace ``key`` (an op's
    own name for it): a view of a buffer persistent per (stream, key), reallocated (zeroed) only
    when it grows, so a steady step allocates nothing. Reuse is ordered by the stream: the next
    op on it runs after this one's kernels. A workspace the kernel leaves as it found it (the
    penalty op's zero counts) stays zero."""
    cp = _cupy()
    dt = np.dtype(dtype)
    n = max(int(np.prod(shape, dtype=np.int64)), 1)
    k = (_stream(), key, dt.str)
    with _workspace_lock:
        buf = _workspaces.get(k)
        if buf is None or buf.size < n:
            buf = _workspaces[k] = cp.zeros(n, dtype=dt)
    return buf[: max(int(np.prod(shape, dtype=np.int64)), 0)].reshape(shape)


# ------------------------------------------------------------------------------------------
# The error model (docs/gpu_errors.md)
# ------------------------------------------------------------------------------------------
_mode_override: str | None = None


def error_mode() -> str:
    """The error mode now: `set_error_mode`'s, else ``FD_MTP_CUDA_ERRORS`` (default deferred)."""
    from .. import envs

    return _mode_override or envs.get("FD_MTP_CUDA_ERRORS")


def set_error_mode(mode: str | None) -> str | None:
    """Sets the error mode of fd_mtp.cuda (None: back to ``FD_MTP_CUDA_ERRORS``); returns the
    previous override. ``deferred``: an op with data checks launches check and apply without a
    sync; its error is recorded in the stream's persistent record, later ops on the stream skip,
    and the error raises at the next op that synchronises anyway (the flag and shape ops) or at
    `check_pending`. ``checked``: every op synchronises and raises its own error (tests,
    debugging). ``record``: no op raises a recorded error (graph capture); `pending` /
    `check_pending` read it."""
    global _mode_override
    if mode is not None and mode not in ERROR_MODES:
        raise ValueError(f"error mode must be one of {', '.join(ERROR_MODES)}, got {mode!r}")
    previous, _mode_override = _mode_override, mode
    return previous


@contextlib.contextmanager
def errors(mode: str):
    """``with fd_mtp.cuda.errors("checked"): ...``: `set_error_mode` for the block."""
    previous = set_error_mode(mode)
    try:
        yield
    finally:
        set_error_mode(previous)


def pending(stream: int | None = None, clear: bool = True):
    """The first error recorded on ``stream`` (default: CuPy's current stream) since the last
    read, as ``(op name, message)``, or None. Synchronises the stream (one wait). ``clear``
    (default) forgets it and un-poisons the stream."""
    mod = load()
    rec = mod.stream_pending(_stream() if stream is None else stream, clear)
    if rec is None:
        return None
    op_id, status = rec
    if status[0] == 0:  # poisoned with nothing pending: cannot happen (commit sets both)
        return ("fd_mtp", "fd_mtp: the stream is poisoned but no error is recorded")
    from .. import schema

    name = mod.STREAM_OPS[op_id]
    return name, schema.get(name).format_status(*status)


def check_pending(stream: int | None = None) -> None:
    """Raises the first error recorded on ``stream`` since the last check as the ValueError its
    op raises in checked mode (naming the op and the argument), and clears it; returns None when
    there is none. Synchronises the stream."""
    found = pending(stream)
    if found is not None:
        raise ValueError(found[1])


def _raise_pending(stream=None):
    if error_mode() == "record":
        return
    if stream is None and importlib.util.find_spec("cupy") is None:
        return  # no CuPy: no device stream exists, so no deferred device error can be pending
    check_pending(stream)


def _stream():
    """CuPy's current stream; also tells the raw module's hand-written bindings the error mode
    (every wrapper asks for the stream before it launches)."""
    load().set_deferred(error_mode() != "checked")
    return _cupy().cuda.get_current_stream().ptr


# ------------------------------------------------------------------------------------------
# Schema-driven wrappers (fd_mtp/schema): the same checks, Params fill and status messages as
# the Paddle binding generated from the same declaration.
# ------------------------------------------------------------------------------------------
def _host_array(op, tensor, x):
    if not isinstance(x, np.ndarray):
        _fail(op.name, tensor.name, f"must be a host numpy array, got {type(x).__name__}")


def prepare(op_name, values, device_ok=()):
    """Checks the arguments ``values`` (by name) of schema op ``op_name`` and fills its kernel
    Params. Returns ``(op, values, dims, params)``: attributes converted and their keyword-only
    defaults resolved from the environment, the named dims, the filled Params (None for ops
    without one). ``device_ok``: names of host (``cpu``) tensors that may be CuPy arrays too (a
    flag computed on the device); their dtype and shape are checked all the same."""
    from .. import schema
    from ..schema import arrays

    op = schema.get(op_name)
    cp = _cupy()
    if schema.has_python_side(op):  # given, choices, call counters, only_if, python_checks
        values = schema.prepare_call(op, values, CALLS)
    values = dict(values)

    def host_check(op, tensor, x):
        if tensor.name in device_ok and isinstance(x, cp.ndarray):
            return
        _host_array(op, tensor, x)

    schema.check_together(op, values)
    dims = arrays.check_arrays(
        _without_counts(op_name), values, lambda x: isinstance(x, cp.ndarray), host_check
    )
    for a in op.attrs:
        values[a.name] = arrays.convert_attr(
            op, a, schema.resolve_kw(op_name, a.name, values[a.name])
        )
    for t in op.tensors:  # token counts (Tensor(count=...)), read on the host
        if t.count is not None:
            dims[t.count] = _host_count(op.name, t.name, values[t.name])
    attrs = {a.name: values[a.name] for a in op.attrs}
    arrays.check_same_dtypes(op, values)
    shapes = {t.name: values[t.name].shape for t in op.tensors if hasattr(values[t.name], "shape")}
    schema.check_rules(op, attrs, dims, shapes)
    for name, expr in op.computed_dims.items():  # as the binding, after the rules
        dims[name] = schema.expr_value(expr, attrs, dims, shapes)
    for rule in op.requires:  # as the generated binding: a named dim against the attributes
        need = schema.required(op, rule, attrs)
        if dims[rule.dim] < need:
            _fail(
                op.name,
                rule.tensor,
                f"needs at least {need} columns, got shape {list(values[rule.tensor].shape)}",
            )
    params = None
    if op.params:
        params = getattr(load(), op.params)()
        arrays.fill_params(op, params, values, dims, _ptr)
    return op, values, dims, params


_INT32_MAX = np.iinfo(np.int32).max


@functools.cache
def _without_counts(op_name):
    """The op without its count tensors: those are read by `_host_count` instead of the array
    checks (an int, or a numpy or CuPy one-element array)."""
    import dataclasses

    from .. import schema

    op = schema.get(op_name)
    if not any(t.count for t in op.tensors):
        return op
    return dataclasses.replace(
        op, args=tuple(a for a in op.args if getattr(a, "count", None) is None)
    )


def _host_count(op, arg, value):
    """A token count (int, numpy or CuPy one-element integer array), read on the host: the
    binding's check::host_count."""
    if isinstance(value, (int, np.integer)):
        v = int(value)
    else:
        cp = _cupy()
        a = cp.asnumpy(value) if isinstance(value, cp.ndarray) else np.asarray(value)
        if a.size != 1 or a.dtype not in (np.int64, np.int32):
            _fail(
                op,
                arg,
                f"must hold exactly one int64 or int32 element, got {a.dtype}{list(a.shape)}",
            )
        v = int(a.reshape(-1)[0])
    if not 0 <= v <= _INT32_MAX:
        _fail(op, arg, f"is {v}; it must be in [0, {_INT32_MAX}]")
    return v


def _out_array(op, arg, a, shape, dt):
    """A persistent output array: a C-contiguous CuPy array of exactly ``shape`` and ``dt``."""
    _dtype(op, arg, a, dt)
    if tuple(a.shape) != tuple(shape):
        _fail(op, arg, f"must have shape {list(shape)}, got {list(a.shape)}")


def _outputs(op, values, dims, p, out):
    """The op's declared outputs (fd_mtp.schema.Out) for one call: new CuPy arrays, or the
    persistent arrays ``out`` (a list in the outputs' order, checked; zero-filled ones zeroed
    on the stream); their addresses go into the Params ``p``."""
    cp = _cupy()
    if out is not None and (not isinstance(out, (list, tuple)) or len(out) != len(op.outputs)):
        _fail(op.name, "out", f"must be a list of the {len(op.outputs)} output arrays")
    sizes = {**dims, **{a.name: values[a.name] for a in op.attrs}}
    arrays = []
    for i, o in enumerate(op.outputs):
        shape = o.shape(sizes)
        dtype = values[o.like].dtype if o.like else o.dtype
        if out is None:
            if o.fill is None:
                a = cp.empty(shape, dtype=dtype)
            else:
                a = cp.full(shape, o.fill, dtype=dtype)
        else:
            a = out[i]
            _out_array(op.name, f"out[{i}] ({o.name})", a, shape, dtype)
            if o.fill == 0:
                load().memset_async(_ptr(a), 0, a.nbytes, _stream())
            elif o.fill is not None:
                a.fill(o.fill)
        if o.param is not None:
            setattr(p, o.param, _ptr(a))
        arrays.append(a)
    return arrays


def raise_status(op, status):
    """Raises the op's ValueError for a kernel status tuple (code, request, value, limit), after
    the stream's pending error (an earlier deferred op's, which comes first; outside record
    mode). Called after a sync, so reading the record waits for nothing. None (a hand-written
    binding in deferred mode: the status went to the stream's record) raises nothing now."""
    if status is None:  # deferred by the binding: recorded on the device, raised later
        return
    _raise_pending()
    if status[0] == load().STATUS_POISONED:  # record mode: skipped on a poisoned stream
        return
    if status[0] != 0:
        raise ValueError(op.format_status(*status))


# ------------------------------------------------------------------------------------------
# The standard dispatch (schema ``cpu=``): one generic launch, the same steps as the generated
# Paddle binding's GPU branch.
# ------------------------------------------------------------------------------------------
_DEVICE_FLAGS: dict = {}  # op name -> fd_mtp.schema.DeviceFlag (parsed once)


def _flag_args(op, values, dims, p):
    """The device form of the op's flag for this call (fd_mtp.schema.device_flag): ``(offset,
    bound_ptr, bound)``. The bound tensor (``stop_nums``) is read on the device when it is a
    CuPy array (bound_ptr), and its value is host-known when it is a numpy array (the binding's
    check made it a one-element int64): nothing is read back from the device."""
    form = _DEVICE_FLAGS.get(op.name)
    if form is None:
        from .. import schema

        form = _DEVICE_FLAGS[op.name] = schema.device_flag(op)
    offset, bound = form.host_ints(dims, p)
    if form.bound_tensor is None:
        return offset, 0, bound
    x = values[form.bound_tensor]
    if not isinstance(x, _cupy().ndarray):  # numpy (the simt stand-in's arrays are numpy's too)
        return offset, 0, int(x.reshape(-1)[0])
    return offset, _ptr(x), 0


def launch(op_name, values, check=None, out=None):
    """Runs the standard-dispatch op ``op_name`` on CuPy arrays ``values`` (by name): checks and
    Params fill (`prepare`), ``check(op, values, dims, params)`` (the Python side of an op's
    ``<op>_check`` hook, when it has one), the launcher of the raw module on the stream's
    persistent status record. A kernel status raises by name as `error_mode` says: at once in
    checked mode, at the next synchronising op or `check_pending` in deferred mode.

    The op's ``flag`` (``not_need_stop``) is computed on the device after the op by one small
    kernel from the op's count (fd_mtp.schema.device_flag; ``stop_nums`` read there) and left
    unchanged when the op failed or was skipped on a poisoned stream. A CuPy bool[1] flag is
    written there, stream-ordered: no sync (but in checked mode), no allocation. A host numpy
    bool[1] flag (FastDeploy's contract) makes the op synchronise and read the flag back with the
    record, raising what is pending first (but in record mode).

    An op with declared outputs (fd_mtp.schema.Out) returns them as a list of new CuPy arrays,
    or writes the persistent arrays ``out`` (a list in the same order; ``values["out"]`` when
    not given: the generated wrapper's keyword) and returns those."""
    from .. import schema

    op = schema.get(op_name)
    flag = op.flag[0] if op.flag is not None else None
    op, values, dims, p = prepare(op_name, values, device_ok=(flag,) if flag else ())
    if check is not None:
        check(op, values, dims, p)
    if out is None:
        out = values.get("out")
    if op.rows is not None:
        return _launch_rows(op, values, dims, p, out)
    outs = _outputs(op, values, dims, p, out) if op.outputs else None
    names = (
        {a.name: values[a.name] for a in op.attrs},
        dims,
        {t.name: values[t.name].shape for t in op.tensors if hasattr(values[t.name], "shape")},
    )
    if op.skip is not None and schema.expr_value(op.skip, *names):
        return outs  # nothing to do: no kernel runs
    for w in op.workspaces:  # persistent per (stream, key); zero when (re)allocated
        if w.key in NULL_WORKSPACES:
            continue
        n = schema.expr_value(w.count, *names)
        setattr(p, w.param, _ptr(_workspace(w.key, (max(n, 1),), w.dtype)))
    _run(op, values, dims, p, flag)
    return outs


def _launch_rows(op, values, dims, p, out):
    """`launch` of an op whose outputs' rows are data (fd_mtp.schema.Rows), as the generated
    binding's GPU branch: the rows launcher on the stream's record, its count read back (one
    sync; not where the rows are host-known), then the outputs allocated and written. With
    ``padded`` (fd_mtp.cuda's fixed-capacity variant, ``values["padded"]``): outputs of the
    capacity's rows (or the persistent ``out``), the count kept on the device, no host read."""
    from .. import schema

    rows, mod, mode, stream = op.rows, load(), error_mode(), _stream()
    names = (
        {a.name: values[a.name] for a in op.attrs},
        dims,
        {t.name: values[t.name].shape for t in op.tensors if hasattr(values[t.name], "shape")},
    )
    data = rows.when is None or schema.expr_value(rows.when, *names)
    for w in op.workspaces:  # persistent per (stream, key)
        n = schema.expr_value(w.count, *names)
        setattr(p, w.param, _ptr(_workspace(w.key, (max(n, 1),), w.dtype)))
    live = 0
    if values.get("padded"):
        if rows.capacity is None or not data:
            what = "no fixed-capacity variant" if rows.capacity is None else rows.when
            _fail(op.name, "padded", f"needs {what}")
        dims[rows.dim] = dims[rows.capacity]
        live = _ptr(_workspace(f"{op.name}_live_rows", (1,), np.int64))
        setattr(p, rows.live, live)
    elif out is not None:
        _fail(op.name, "out", "needs padded=True (the fixed-capacity variant)")
    else:
        found = getattr(mod, f"{op.name}_rows")(p, stream, bool(data))
        if data:  # the shape read: this op's error, or an earlier one's, raises first
            if mode != "record":
                check_pending(stream)
            if found[0][0] == mod.STATUS_POISONED:
                _fail(
                    op.name,
                    "input",
                    "was not run: an earlier op on the stream failed (record mode)",
                )
            raise_status(op, found[0])
            dims[rows.dim] = found[1]
        else:
            dims[rows.dim] = schema.expr_value(rows.otherwise, *names)
    setattr(p, rows.param, dims[rows.dim])
    if out is not None and len(op.outputs) == 1 and not isinstance(out, (list, tuple)):
        o, sizes = op.outputs[0], {**dims, **names[0]}  # the one output, as an array
        _out_array(op.name, "out", out, o.shape(sizes), values[o.like].dtype if o.like else o.dtype)
        out = [out]
    outs = _outputs(op, values, dims, p, out)
    getattr(mod, op.name)(p, live, stream, sync=mode == "checked")
    if mode == "checked":
        check_pending(stream)
    return outs


def _run(op, values, dims, p, flag):
    """`launch`'s call of the raw module's launcher (see launch)."""
    fn = getattr(load(), op.name)
    mode = error_mode()
    stream = _stream()
    if not op.status:
        fn(p, stream, sync=mode == "checked")
        return
    # Status address 0: the stream's persistent record (no allocation; no sync but for a flag).
    if flag is None:
        fn(p, 0, stream)
        if mode == "checked":
            check_pending(stream)
        return
    offset, bound_ptr, bound = _flag_args(op, values, dims, p)
    target = values[flag]
    if isinstance(target, _cupy().ndarray):  # checked: bool, one element
        fn(p, 0, 0, stream, _ptr(target), offset, bound_ptr, bound)  # stream-ordered, no sync
        if mode == "checked":
            check_pending(stream)
        return
    st, _, value = fn(p, 0, 0, stream, 0, offset, bound_ptr, bound)  # synchronises
    if mode != "record":
        check_pending(stream)  # this op's error or an earlier one's: nothing more to wait for
    if st[0] != 0:  # skipped (recorded, or poisoned): the flag keeps its value
        return
    _set_flag(target, value)


def define_launchers(namespace, family):
    """Defines ``fd_mtp.cuda.<op>`` in ``namespace`` (a module's globals) for every
    standard-dispatch op of schema family ``family`` that the module does not define by hand.
    Returns the names of the family's ops the module offers."""
    from .. import schema

    names = []
    for op in schema.family_ops(family):
        if (not op.generated_dispatch or not op.cuda) and op.name not in namespace:
            continue
        names.append(op.name)
        if op.name in namespace:
            continue
        notes = []
        if op.flag:
            notes.append(
                f"{op.flag[0]}: host numpy bool[1] (the op synchronises to set it) or a CuPy "
                "bool[1] (set on the device by the stream: no sync), left unchanged when the op "
                "fails or is skipped"
            )
        notes += [
            f"{n}: one int64 element, CuPy (read on the device) or numpy"
            for n in schema.host_reads(op)
        ]
        notes += [
            f"{t.name}: an int or a one-element int64 / int32 array (numpy or CuPy), read on "
            "the host"
            for t in op.tensors
            if t.count is not None
        ]
        if op.outputs:
            notes.append(
                "returns new CuPy arrays, or writes the persistent arrays ``out`` (keyword-only, "
                "fd_mtp.cuda only: a list in the order of the outputs) and returns those"
            )
        doc = f"fd_mtp.ops.{op.name} on CuPy arrays" + (f" ({'; '.join(notes)})." if notes else ".")
        if op.rows is not None and op.rows.capacity is not None:
            notes.append(
                "``padded=True`` (keyword-only, fd_mtp.cuda only) selects the fixed-capacity "
                f"variant: {op.rows.capacity} rows, the first {op.rows.dim} written, zero rows "
                "after them, the count kept on the device (nothing read on the host)"
            )
        namespace.setdefault("launch", launch)
        extra = ("out",) if op.outputs else ()
        if op.rows is not None and op.rows.capacity is not None:
            extra = ("padded", "out")
        schema.define_wrapper(op, namespace, "launch", doc, extra)
    return names
