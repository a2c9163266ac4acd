"""Loads the compiled op library once and calls its ops.

The library registers every op with paddle under the prefix ``fd_mtp_`` (so it
can share a process with FastDeploy's own ops); `call` runs one in dynamic mode.
"""
from __future__ import annotations

import functools
import re
import warnings
from pathlib import Path

LIB_DIR = Path(__file__).resolve().parent.parent / "_lib"
LIB_NAME = "libfd_mtp_ops.so"
BUILD_HINT = "build it from the fd_mtp checkout with `make build` (or `pip install .`)"


@functools.cache
def _runner():
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


def load() -> None:
    """Load the op library now (it is otherwise loaded on the first op call)."""
    _runner()


# Paddle appends the C++ source location to a PD_THROW message; users need
# only the message itself.
_SOURCE_SUFFIX = re.compile(r"\s*\[[^\]]*\.(?:cc|h|cu):\d+\]\s*$")


def call(op: str, *args):
    """Run registered op ``fd_mtp_<op>`` on positional tensors and attributes."""
    try:
        return _runner()("fd_mtp_" + op, *args)
    except OSError as exc:  # how paddle surfaces PD_THROW from a custom op
        raise ValueError(_SOURCE_SUFFIX.sub("", str(exc)).strip()) from None
