# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""KV-cache sharing between processes (spec ../shared/spec/ops.md §7): set_data_ipc,"""

from collections.abc import Sequence

import paddle

__all__ = ["set_data_ipc", "share_external_data", "shared_empty", "shared_zeros", "unset_data_ipc"]

def set_data_ipc(
    tensor: paddle.Tensor,
    shm_name: str,
) -> None:
    """Publish ``tensor`` under POSIX shared-memory name ``shm_name`` (spec §7, producer).

    Args:
        tensor: any shape (rank <= 8) and dtype, read (declared in place as upstream,
            never modified). GPU: any tensor (its CUDA allocation is exported).
            CPU: a tensor from :func:`shared_empty` / :func:`shared_zeros` or
            :func:`share_external_data` (or a contiguous view into one); any
            other CPU tensor raises ValueError naming ``tensor``. Strided views
            raise ValueError.
        shm_name: ``"/name"``; the segment is created, or replaced if it exists.

    Returns:
        None. The publication lasts until ``unset_data_ipc(..., unlink_shm=True)``
        or this process's exit.

    Example:
        >>> import fd_mtp.ops as ops
        >>> cache = ops.shared_zeros([4, 2, 8, 16], "bfloat16")
        >>> ops.set_data_ipc(cache, "/doc_key_caches_0_rank0.device0")
        >>> ops.unset_data_ipc(cache, "/doc_key_caches_0_rank0.device0", False, True)
    """
    ...

def share_external_data(
    input: paddle.Tensor,
    shm_name: str,
    shape: Sequence[int],
) -> paddle.Tensor:
    """Attach to the tensor published under ``shm_name`` (spec §7, consumer; no copy).

    Args:
        input: any tensor, read: supplies only the dtype and the device (CPU, or
            the GPU to open the IPC handle on) of the result.
        shm_name: a publication of :func:`set_data_ipc` (GPU: FastDeploy's too).
            A missing name raises ValueError naming ``shm_name``.
        shape: list of ints, the result's shape; ``prod(shape) * itemsize`` must
            not exceed the published tensor's bytes (ValueError naming ``shape``).
            Any dtype is accepted (a reinterpretation, as upstream).

    Returns:
        A tensor of ``shape`` and ``input.dtype`` over the published memory: writes
        are seen by every process sharing it. Its mapping lives as long as it does.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> cache = ops.shared_zeros([2, 3], "float32")
        >>> ops.set_data_ipc(cache, "/doc_share")
        >>> view = ops.share_external_data(paddle.empty([0], "float32"), "/doc_share", [6])
        >>> view[4] = 7.0
        >>> cache.tolist()
        [[0.0, 0.0, 0.0], [0.0, 7.0, 0.0]]
        >>> ops.unset_data_ipc(cache, "/doc_share", False, True)
    """
    ...

def shared_empty(
    shape: list[int],
    dtype: str | paddle.dtype = "float32",
    name: str | None = None,
) -> paddle.Tensor:
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
    ...

def shared_zeros(
    shape: list[int],
    dtype: str | paddle.dtype = "float32",
    name: str | None = None,
) -> None:
    """Like :func:`shared_empty`; the contents are zero (a new segment is zero-filled).

    Example:
        >>> import fd_mtp.ops as ops
        >>> ops.shared_zeros([2], "int32").tolist()
        [0, 0]
    """
    ...

def unset_data_ipc(
    tensor: paddle.Tensor,
    shm_name: str,
    close_ipc: bool,
    unlink_shm: bool,
) -> None:
    """Close an attachment and/or remove a publication (spec §7).

    Args:
        tensor: read (declared in place as upstream). With ``close_ipc``: a tensor
            returned by :func:`share_external_data` (else ValueError naming ``tensor``).
        shm_name: with ``unlink_shm``: the publication to remove (a missing one
            raises ValueError naming ``shm_name``).
        close_ipc: release ``tensor``'s attachment now. GPU: ``cudaIpcCloseMemHandle``
            (every tensor over that handle becomes invalid, as upstream). CPU: its
            shared pages are replaced by private zero pages.
        unlink_shm: ``shm_unlink(shm_name)``: no process can attach under the name
            any more; existing attachments are unaffected.

    Everything that can be refused is checked before anything changes: a bad
    or missing ``shm_name`` with ``close_ipc`` leaves ``tensor`` attached.

    Returns:
        None.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> cache = ops.shared_zeros([2], "float32")
        >>> ops.set_data_ipc(cache, "/doc_unset")
        >>> view = ops.share_external_data(cache, "/doc_unset", [2])
        >>> ops.unset_data_ipc(view, "/doc_unset", True, True)
        >>> cache[0] = 1.0
        >>> view.tolist()
        [0.0, 0.0]
    """
    ...
