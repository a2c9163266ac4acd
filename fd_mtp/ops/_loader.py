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
import re
import warnings
from pathlib import Path

LIB_DIR = Path(__file__).resolve().parent.parent / "_lib"
LIB_NAME = "libfd_mtp_ops.so"
BUILD_HINT = "build it from the fd_mtp checkout with `make build` (or `pip install .`)"


@functools.cache
def _module():
    _register()
    try:
        return importlib.import_module("fd_mtp._lib.fd_mtp_ops_pybind")
    except ImportError as exc:
        raise ImportError(f"cannot load fd_mtp's op module fd_mtp_ops_pybind ({exc}): {BUILD_HINT}") from exc


@functools.cache
def _register():
    path = LIB_DIR / LIB_NAME
    if not path.exists():
        raise ImportError(f"fd_mtp's op library {path} is missing: {BUILD_HINT}")
    try:
        from paddle import _C_ops

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
    return _C_ops._run_custom_op


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
# only the message itself.
_SOURCE_SUFFIX = re.compile(r"\s*\[[^\]]*\.(?:cc|h|cu):\d+\]\s*$")


def call(op: str, *args):
    """Run op ``<op>`` on positional tensors and attributes (dynamic mode)."""
    fn = getattr(_module(), op)
    try:
        return fn(*args)
    except ValueError as exc:  # an argument check (PD_THROW) of the op
        raise ValueError(_SOURCE_SUFFIX.sub("", str(exc)).strip()) from None
