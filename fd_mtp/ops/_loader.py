"""Loads the compiled op library once and calls its ops.

The library registers every op with paddle under the prefix ``fd_mtp_`` (so it
can share a process with FastDeploy's own ops, and static-graph programs can
use them). In dynamic mode `call` runs an op through the pybind11 module
``fd_mtp_ops_pybind`` instead, as FastDeploy does: paddle 3.3's generic runner
``_C_ops._run_custom_op`` copies the registry of every loaded custom op on each
call (tens of microseconds with a few dozen ops), a direct call costs ~2 us.
"""

from __future__ import annotations

import functools
import importlib
import importlib.machinery
import importlib.util
import re
import warnings
from pathlib import Path

from ..schema import CallCounter

LIB_DIR = Path(__file__).resolve().parent.parent / "_lib"
LIB_NAME = "libfd_mtp_ops.so"
LIB_DIR_ENV = "FD_MTP_OPS_LIB_DIR"
BUILD_HINT = "build it from the fd_mtp checkout with `make build` (or `pip install .`)"


def lib_dir() -> Path:
    """Where the op library is loaded from: ``FD_MTP_OPS_LIB_DIR`` (e.g. the Paddle GPU build of
    ``make test``, build/paddle-gpu/lib) or fd_mtp/_lib."""
    from .. import envs

    directory = envs.get(LIB_DIR_ENV)
    return Path(directory) if directory else LIB_DIR


@functools.cache
def _module():
    _register()
    directory = lib_dir()
    try:
        if directory == LIB_DIR:
            module = importlib.import_module("fd_mtp._lib.fd_mtp_ops_pybind")
        else:
            found = importlib.machinery.PathFinder.find_spec("fd_mtp_ops_pybind", [str(directory)])
            if found is None:
                raise ImportError(f"no fd_mtp_ops_pybind module in {directory}")
            module = importlib.util.module_from_spec(found)
            found.loader.exec_module(module)
    except ImportError as exc:
        raise ImportError(
            f"cannot load fd_mtp's op module fd_mtp_ops_pybind ({exc}): {BUILD_HINT}"
        ) from exc
    from .. import envs

    module._set_error_mode(envs.get("FD_MTP_CUDA_ERRORS"))
    return module


@functools.cache
def _register():
    path = lib_dir() / LIB_NAME
    if not path.exists():
        raise ImportError(f"fd_mtp's op library {path} is missing: {BUILD_HINT}")
    try:
        from ._paddle_compat import custom_op_runner

        with warnings.catch_warnings():  # paddle warns about ccache, which we do not use
            warnings.simplefilter("ignore")
            from paddle.utils.cpp_extension.extension_utils import (
                load_op_meta_info_and_register_op,
            )
    except ImportError as exc:
        raise ImportError(
            f"fd_mtp.ops needs paddle ({exc}); install paddlepaddle, then {BUILD_HINT}"
        ) from exc
    try:
        load_op_meta_info_and_register_op(str(path))
    except Exception as exc:  # e.g. built against another paddle version
        raise ImportError(f"cannot load {path} ({exc}); rebuild it: {BUILD_HINT}") from exc
    return custom_op_runner()


def run_registered(op: str, *args):
    """Run op ``fd_mtp_<op>`` through paddle's generic custom-op runner (what a program that
    only knows the registered name uses; slower than `call`)."""
    try:
        return _register()("fd_mtp_" + op, *args)
    except OSError as exc:  # how paddle surfaces PD_THROW from a custom op
        raise ValueError(_SOURCE_SUFFIX.sub("", str(exc)).strip()) from None


def load() -> None:
    """Load the op library now (it is otherwise loaded on the first op call)."""
    _module()


# Paddle appends the C++ source location to a PD_THROW message; users need
# only the message itself. The location has no "[" inside, so a message that
# ends in a half-open range ("must be in [0, 300)") keeps it.
_SOURCE_SUFFIX = re.compile(r"\s*\[[^\[\]]*\.(?:cc|h|cu):\d+\]\s*$")
# A failed system call's message ends in "[errno N]" (custom_ops/paddle/msgqueue.cc): OSError.
_ERRNO = re.compile(r"\[errno (\d+)\]$")


def call(op: str, *args):
    """Run op ``<op>`` on positional tensors and attributes (dynamic mode)."""
    fn = getattr(_module(), op)
    try:
        return fn(*args)
    except ValueError as exc:  # an argument check (PD_THROW) of the op
        text = _SOURCE_SUFFIX.sub("", str(exc)).strip()
        failed = _ERRNO.search(text)  # a failed system call (SysV queue, shared memory)
        if failed:
            raise OSError(int(failed.group(1)), text) from None
        raise ValueError(text) from None


# ---------------------------------------------------------------------------------------------
# Schema-driven calls: every wrapper passes its arguments by name; the op's schema (fd_mtp/schema)
# orders them for the compiled op, checks Python types and attribute ranges, and resolves
# keyword-only defaults from the environment (fd_mtp.envs).
# ---------------------------------------------------------------------------------------------
def _tensor_type():
    import paddle

    return paddle.Tensor


def _type_name(value) -> str:
    from ..schema.arrays import type_name

    return type_name(value)


@functools.cache
def _plan(op_name: str):
    from .. import schema
    from ..schema.arrays import convert_attr

    op = schema.get(op_name)
    return op, op.tensors, op.attrs, convert_attr


# fd_mtp.ops' call counters (the default RNG position of an op: fd_mtp.schema.prepare_call).
CALLS = CallCounter()


@functools.cache
def _python_side(op_name: str) -> bool:
    """Whether the op declares Python-side steps (fd_mtp.schema.prepare_call)."""
    from .. import schema

    return schema.has_python_side(schema.get(op_name))


def invoke(op_name: str, values: dict):
    """Run op ``op_name`` with the arguments in ``values`` (by their C++ names, e.g. a wrapper's
    ``locals()``): tensors must be paddle Tensors (None only where optional), attributes are
    converted and range-checked, and a keyword-only attribute left at None takes its environment
    default. Errors name the argument."""
    op, tensors, attrs, convert_attr = _plan(op_name)
    if _python_side(op_name):  # given, choices, call counters, only_if tensors, python_checks
        from ..schema import prepare_call

        values = prepare_call(op, values, CALLS)
    tensor_type = _tensor_type()
    args = []
    for t in tensors:
        value = values[t.name]
        if value is None and t.optional:
            args.append(None)
            continue
        if not isinstance(value, tensor_type):
            raise TypeError(f"{op_name}: {t.name} must be a paddle.Tensor, got {_type_name(value)}")
        if t.role == "written" and not value.is_contiguous():
            # paddle hands a custom op a contiguous copy of a strided view: the op's writes
            # (or, for set_data_ipc, the memory it publishes) would not be the view's
            raise ValueError(
                f"{op_name}: {t.name} must be contiguous (the op works on its memory in place), "
                f"got a strided view of shape {list(value.shape)}"
            )
        args.append(value)
    for a in attrs:
        value = values[a.name] if a.name in values else values[a.python_name]
        if a.resolve is not None or (value is None and a.env is not None):
            value = _resolve(op_name, a, value)
        args.append(convert_attr(op, a, value))
    return call(op_name, *args)


def _resolve(op_name: str, a, value):
    """Attribute ``a``'s value through its schema resolver / environment default; an error the
    resolver raises (it names the argument) is prefixed with the op's name."""
    from .. import schema

    try:
        return schema.resolve_kw(op_name, a.name, value)
    except (TypeError, ValueError) as exc:
        text = str(exc)
        if text.startswith(f"{op_name}: "):
            raise
        raise type(exc)(f"{op_name}: {text}") from None


def define_ops(namespace: dict, family: str) -> list[str]:
    """Defines ``fd_mtp.ops.<op>`` in ``namespace`` (a module's globals) for every op of schema
    family ``family`` whose docstring lives in its schema (``doc=``): a function with the
    schema's Python signature that runs the op through `invoke`. Ops the module writes by hand
    (Python-side checks or glue no schema expresses) keep their own function and docstring.
    Returns the names of the family's ops the module offers, for its ``__all__``."""
    from .. import schema

    names = []
    for op in schema.family_ops(family):
        if op.name in namespace:
            if op.doc:
                raise RuntimeError(f"{op.name}: written by hand and documented in its schema")
        elif op.doc:
            namespace.setdefault("invoke", invoke)
            schema.define_wrapper(op, namespace, "invoke", op.doc)
        else:
            continue
        names.append(op.name)
    return names


# ------------------------------------------------------------------------------------------
# Deferred GPU errors (docs/gpu_errors.md). The Paddle ops' GPU branch records a data error in
# its stream's persistent record (no sync per op, outside checked mode); it raises, by the
# failing op's name, at the branch's next host read (an op's CPU not_need_stop, a shape op's
# count) or at `check_pending`. fd_mtp.cuda registers its own reader too.
# ------------------------------------------------------------------------------------------
_pending_checks: list = []


def _check_pending_paddle() -> None:
    """The Paddle extension's pending error (a no-op until the library is loaded, and on a
    CPU-only build)."""
    if _module.cache_info().currsize == 0:
        return  # not loaded: no op ran, nothing can be pending
    try:
        _module()._check_pending()
    except ValueError as exc:
        raise ValueError(_SOURCE_SUFFIX.sub("", str(exc)).strip()) from None


def set_error_mode(mode: str | None) -> str:
    """Sets the error mode of the Paddle ops' GPU branch: ``deferred`` (the default, no sync per
    op), ``checked`` (every op synchronises and raises its own error) or ``record`` (nothing
    raises by itself; `check_pending` reads); None: back to ``FD_MTP_CUDA_ERRORS``. Returns the
    previous mode. The CPU branch always raises at the call."""
    from .. import envs

    modes = ("deferred", "checked", "record")
    if mode is not None and mode not in modes:
        raise ValueError(f"error mode must be one of {', '.join(modes)}, got {mode!r}")
    module = _module()
    previous = module._error_mode()
    module._set_error_mode(envs.get("FD_MTP_CUDA_ERRORS") if mode is None else mode)
    return previous


def register_pending_check(fn) -> None:
    """Adds ``fn()`` (raises the first pending error of its layer) to `check_pending`."""
    if fn not in _pending_checks:
        _pending_checks.append(fn)


def check_pending() -> None:
    """Raises the first op error recorded on the device but not raised yet (the ValueError its op
    raises in checked mode, naming the op and the argument) and clears it; returns None when
    there is none. Synchronises the current stream of each registered layer."""
    _check_pending_paddle()
    for fn in list(_pending_checks):
        fn()
