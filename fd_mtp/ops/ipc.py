"""KV-cache sharing between processes (spec ../shared/spec/ops.md §7): set_data_ipc,
share_external_data and unset_data_ipc are declared and documented in fd_mtp/schema/ipc.py (with
the lifetime and ownership rules); written here: the allocators of shareable CPU tensors."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..shm import posix_name  # noqa: F401 - part of the API
from ._composite import renamed
from ._loader import define_ops

if TYPE_CHECKING:
    import paddle

__all__ = [*define_ops(globals(), "ipc"), "shared_empty", "shared_zeros"]


def _dtype_carrier(op, dtype):
    """A zero-size CPU tensor of ``dtype`` (what the op reads the dtype from), or TypeError naming
    ``dtype``."""
    import paddle

    try:
        return paddle.empty([0], dtype=dtype).cpu()
    except (TypeError, ValueError):
        raise TypeError(
            f"{op}: dtype must be a paddle dtype or its name (e.g. 'float32', paddle.bfloat16), "
            f"got {dtype!r}"
        ) from None


def shared_empty(shape: list[int], dtype: str | paddle.dtype = "float32", name: str | None = None):
    """A new CPU tensor whose memory is a POSIX shared-memory segment (publishable).

    Use it for CPU tensors that other processes should share (KV caches): publish
    with :func:`set_data_ipc`, attach elsewhere with :func:`share_external_data`.
    A fresh segment is zero-filled by the kernel, so the contents are zeros
    (:func:`shared_zeros` says so explicitly).

    Args:
        shape: list of ints >= 0, the tensor's shape; a tensor larger than this
            machine's physical memory raises ValueError naming ``shape``.
        dtype: any paddle dtype (``"float32"``, ``paddle.bfloat16``, ``"uint8"``, ...).
        name: the backing segment's POSIX name (``"/my_cache"``; must not exist),
            or None for a generated ``/fd_mtp.<pid>.<n>``. The name is removed when
            the tensor is freed or this process exits (see fd_mtp/schema/ipc.py).

    Returns:
        A CPU ``paddle.Tensor`` of ``shape`` and ``dtype`` (not an fd_mtp-specific
        type: every paddle op works on it in place).

    Example:
        >>> import fd_mtp.ops as ops
        >>> t = ops.shared_empty([2, 3], "float32")
        >>> list(t.shape), t.place.is_cpu_place(), float(t.sum())
        ([2, 3], True, 0.0)
    """
    from ._loader import invoke

    op = "shared_empty"
    if name is None:
        name = ""
    elif not isinstance(name, str) or not name:
        raise ValueError(f"{op}: name must be a non-empty str or None, got {name!r}")
    dtype = _dtype_carrier(op, dtype)  # the op's input: a zero-size CPU tensor of the dtype
    return invoke(op, locals())[0]


def shared_zeros(shape: list[int], dtype: str | paddle.dtype = "float32", name: str | None = None):
    """Like :func:`shared_empty`; the contents are zero (a new segment is zero-filled).

    Example:
        >>> import fd_mtp.ops as ops
        >>> ops.shared_zeros([2], "int32").tolist()
        [0, 0]
    """
    with renamed("shared_zeros", "shared_empty", alias=True):
        return shared_empty(shape, dtype, name)
