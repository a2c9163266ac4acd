"""Shared helpers of fd_mtp.cuda: loading the compiled module, CuPy, argument checks that
mirror custom_ops/paddle/check.h, kernel-status decoding and scratch buffers."""

from __future__ import annotations

import functools
import importlib
import os
import sys

import numpy as np

MODULE_DIR_ENV = "FD_MTP_CUDA_MODULE_DIR"
BUILD_HINT = (
    "build it with `make cuda-module` (or `python cmake/fd_mtp_build.py cuda-module`, which needs "
    "no paddle) from the fd_mtp checkout (output: fd_mtp/_lib), or point "
    f"{MODULE_DIR_ENV} at the directory holding an fd_mtp_cuda*.so"
)

STATUS_WORDS = 3  # KernelStatus {int32 code, int32 request, int64 value, int64 limit} = 24 bytes


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


def _per_request(op, arg, a, dt, bsz):
    _dtype(op, arg, a, dt)
    s = a.shape
    if not (len(s) == 1 or (len(s) == 2 and s[1] == 1)):
        _fail(op, arg, f"must have shape [bsz] or [bsz, 1], got {list(s)}")
    if s[0] < bsz:
        _fail(
            op,
            arg,
            f"has {s[0]} entries but the batch has {bsz} requests "
            "(bsz is taken from seq_lens_this_time)",
        )
    return s[0]


def _matrix(op, arg, a, dt, bsz, min_cols=1):
    _dtype(op, arg, a, dt)
    s = a.shape
    if len(s) != 2:
        _fail(op, arg, f"must be 2-D, got shape {list(s)}")
    if s[0] < bsz:
        _fail(op, arg, f"has {s[0]} rows but the batch has {bsz} requests")
    if s[1] < min_cols:
        _fail(op, arg, f"needs at least {min_cols} columns, got shape {list(s)}")
    return s[1]


def _host_flag(op, arg, a):
    if not isinstance(a, np.ndarray) or a.dtype != np.bool_ or a.size != 1:
        _fail(op, arg, "must be a host numpy bool array holding exactly one element")


def _set_flag(a, value):
    a.reshape(-1)[0] = bool(value)  # a view of a C-contiguous array: writes land in `a`


def _ptr(a):
    return a.data.ptr


def _check_status(op, status, table):
    code, request, value, limit = status
    if code == 0:
        return
    where = f"(request {request}) " if request >= 0 else ""
    if code in table:
        arg, what = table[code]
        _fail(op, arg, where + what.format(value=value, limit=limit))
    _fail(op, "input", f"is invalid (kernel status {code})")


def _scratch(words=STATUS_WORDS):
    cp = _cupy()
    return cp.zeros(words, dtype=cp.int64)


def _stream():
    return _cupy().cuda.get_current_stream().ptr


# ------------------------------------------------------------------------------------------
# Schema-driven wrappers (fd_mtp/schema): the same checks, Params fill and status messages as
# the Paddle binding generated from the same declaration.
# ------------------------------------------------------------------------------------------
def _host_array(op, tensor, x):
    if not isinstance(x, np.ndarray):
        _fail(op.name, tensor.name, f"must be a host numpy array, got {type(x).__name__}")


def prepare(op_name, values):
    """Checks the arguments ``values`` (by name) of schema op ``op_name`` and fills its kernel
    Params. Returns ``(op, values, dims, params)``: attributes converted and their keyword-only
    defaults resolved from the environment, the named dims, the filled Params (None for ops
    without one)."""
    from .. import schema
    from ..schema import arrays

    op = schema.get(op_name)
    cp = _cupy()
    values = dict(values)
    dims = arrays.check_arrays(op, values, lambda x: isinstance(x, cp.ndarray), _host_array)
    for a in op.attrs:
        values[a.name] = arrays.convert_attr(
            op, a, schema.resolve_kw(op_name, a.name, values[a.name])
        )
    attrs = {a.name: values[a.name] for a in op.attrs}
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


def raise_status(op, status):
    """Raises the op's ValueError for a kernel status tuple (code, request, value, limit)."""
    if status[0] != 0:
        raise ValueError(op.format_status(*status))


def _host_readable(values, name):
    """``values`` with the one-element array ``name``, which the op reads on the host, as a CuPy
    array: it may be a host numpy array too (the old contract), and is then checked as the
    binding checks it (int64, one element)."""
    x = values[name]
    if isinstance(x, np.ndarray):
        values = dict(values)
        values[name] = _cupy().asarray(x)
    return values


def _host_value(x):
    """The value of a one-element numpy or CuPy array, read on the host."""
    return int(_cupy().asnumpy(x).reshape(-1)[0])


# ------------------------------------------------------------------------------------------
# The standard dispatch (schema ``cpu=``): one generic launch, the same steps as the generated
# Paddle binding's GPU branch.
# ------------------------------------------------------------------------------------------
def launch(op_name, values, check=None):
    """Runs the standard-dispatch op ``op_name`` on CuPy arrays ``values`` (by name): checks and
    Params fill (`prepare`), ``check(op, values, dims, params)`` (the Python side of an op's
    ``<op>_check`` hook, when it has one), the launcher of the raw module, the kernel status
    raised by name, and the op's ``flag`` (a host numpy bool array of one element) set from the
    kernel's count."""
    from .. import schema

    op = schema.get(op_name)
    reads = schema.host_reads(op)
    for name in reads:
        values = _host_readable(values, name)
    op, values, dims, p = prepare(op_name, values)
    if check is not None:
        check(op, values, dims, p)
    fn = getattr(load(), op.name)
    if not op.status:
        fn(p, _stream())
        return
    status = _scratch()
    if op.flag is None:
        raise_status(op, fn(p, _ptr(status), _stream()))
        return
    counter = _scratch(1)
    st, count = fn(p, _ptr(status), _ptr(counter), _stream())
    raise_status(op, st)
    host = {name: _host_value(values[name]) for name in reads}
    _set_flag(values[op.flag[0]], schema.flag_value(op, count, dims, p, host))


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
        notes = [f"{op.flag[0]}: host numpy [1] bool"] if op.flag else []
        notes += [
            f"{n}: one int64 element, CuPy or numpy, read on the host"
            for n in schema.host_reads(op)
        ]
        doc = f"fd_mtp.ops.{op.name} on CuPy arrays" + (f" ({'; '.join(notes)})." if notes else ".")
        namespace.setdefault("launch", launch)
        schema.define_wrapper(op, namespace, "launch", doc)
    return names
