"""fd_mtp.cuda versions of the KV-cache sharing ops (spec §7) on CuPy arrays.

Same names, argument order, shared-memory layout and checks as the GPU branch of
``fd_mtp.ops.set_data_ipc`` / ``share_external_data`` / ``unset_data_ipc`` (see
fd_mtp/schema/ipc.py for the lifetime rules): the segment ``shm_name`` holds the CUDA
IPC handle of the array's allocation (FastDeploy's 72-byte ``shmStruct`` first),
plus the array's offset in that allocation, its size, dtype and shape. A process
on the same machine attaches with ``share_external_data``, which returns a CuPy
array over the producer's memory (no copy).

Lifetime (GPU part of the rules in fd_mtp/schema/ipc.py):
* a publication belongs to the process that wrote it: removed by
  ``unset_data_ipc(..., unlink_shm=True)`` or at that process's normal exit;
* the producer must keep its array (and so its allocation) alive while consumers
  use it: CUDA frees IPC-shared memory when the exporting process frees it or exits;
* an attachment (the returned array) holds an ``fd_mtp_cuda.IpcMemory`` (one per
  process, handle and device, shared by later attachments) that closes the handle
  (``cudaIpcCloseMemHandle``) when the last array over it is freed, or earlier on
  ``unset_data_ipc(array, ..., close_ipc=True)``.

A CUDA allocation cannot be opened through IPC by the process that exported it
(CUDA's rule): attach from another process.
"""

from __future__ import annotations

import atexit
import os
import threading
import weakref

import numpy as np

from ..shm import resolve_shape, resolve_shm_name
from ._common import _cupy, _device_array, _fail, load

__all__ = [
    "set_data_ipc",
    "share_external_data",
    "unset_data_ipc",
]


_lock = threading.Lock()
_published: dict[str, int] = {}  # name -> pid of the publisher (a fork child owns none)
_opened: dict[tuple[bytes, int], weakref.ref] = {}  # (handle, device) -> IpcMemory


@atexit.register
def _unlink_own_publications():
    mod = None
    for name, pid in list(_published.items()):
        if pid != os.getpid():
            continue
        try:
            mod = mod or load()
            mod.ipc_unlink(name)
        except (ImportError, ValueError):
            pass
    _published.clear()


def _resolved(op, resolve, value):
    """``resolve(value)`` (fd_mtp.shm, shared with fd_mtp.ops), its error prefixed with ``op``."""
    try:
        return resolve(value)
    except ValueError as exc:
        raise ValueError(f"{op}: {exc}") from None


def _name(op, shm_name):
    shm_name = _resolved(op, resolve_shm_name, shm_name)
    problem = load().ipc_name_problem(shm_name)
    if problem:
        _fail(
            op,
            "shm_name",
            f"{problem} (a POSIX shared-memory name: a leading '/', no other '/', "
            f"at most {load().IPC_MAX_NAME_LEN} characters)",
        )
    return shm_name


def set_data_ipc(tensor, shm_name) -> None:
    """Publish CuPy array ``tensor`` (C-contiguous, rank <= 8, read) under ``shm_name``."""
    op = "set_data_ipc"
    mod = load()
    _device_array(op, "tensor", tensor)
    shm_name = _name(op, shm_name)
    if shm_name.startswith(mod.IPC_BACKING_PREFIX):
        _fail(
            op,
            "shm_name",
            f"'{shm_name}' starts with '{mod.IPC_BACKING_PREFIX}', which is reserved "
            "for the backing segments of fd_mtp.ops.shared_empty",
        )
    if tensor.ndim > mod.IPC_MAX_RANK:
        _fail(op, "tensor", f"must have rank <= {mod.IPC_MAX_RANK}, got shape {list(tensor.shape)}")
    if tensor.data.ptr == 0:
        _fail(op, "tensor", "has no device memory (an empty array); publish an array with elements")
    mod.ipc_publish_cuda(
        tensor.data.ptr,
        tensor.nbytes,
        shm_name,
        tensor.device.id,
        list(tensor.shape),
        tensor.itemsize,
        str(tensor.dtype),
    )
    with _lock:
        _published[shm_name] = os.getpid()


def _open(handle, device):
    """The process's IpcMemory for (handle, device), opening it on first use."""
    mod = load()
    with _lock:
        ref = _opened.get((handle, device))
        mem = ref() if ref is not None else None
        if mem is None or mem.closed:
            mem = mod.IpcMemory(handle, device)
            _opened[(handle, device)] = weakref.ref(mem)
        return mem


def share_external_data(input, shm_name, shape):
    """A CuPy array of ``shape`` and ``input.dtype`` over the array published under
    ``shm_name`` (no copy), on ``input``'s device. ``input`` supplies only dtype and device.

    Raises ValueError naming ``shm_name`` (missing, invalid, a CPU publication) or
    ``shape`` (more bytes than were published).
    """
    op = "share_external_data"
    cp = _cupy()
    _device_array(op, "input", input)
    dims = _resolved(op, resolve_shape, shape)
    shm_name = _name(op, shm_name)
    rec = load().ipc_read(shm_name)
    if rec["kind"] != "cuda":
        _fail(
            op,
            "input",
            f"is a GPU array but '{shm_name}' publishes a {rec['kind']} tensor "
            "(POSIX shared memory); attach to it with fd_mtp.ops.share_external_data and a CPU input",
        )
    need = int(np.prod(dims, dtype=np.int64)) * input.itemsize
    if rec["nbytes"] is not None and need > rec["nbytes"]:
        _fail(
            op,
            "shape",
            f"{dims} with dtype {input.dtype} needs {need} bytes but the tensor published "
            f"under '{shm_name}' has {rec['nbytes']} bytes ({rec['dtype']} {rec['shape']})",
        )
    mem = _open(rec["handle"], input.device.id)
    offset = rec["offset"]
    if mem.size and offset + need > mem.size:
        _fail(
            op,
            "shape",
            f"{dims} needs {need} bytes but the allocation behind '{shm_name}' has "
            f"{mem.size - offset} bytes after the tensor's start",
        )
    span = max(mem.size - offset if mem.size else need, 1)
    owned = cp.cuda.UnownedMemory(mem.ptr + offset, span, mem, input.device.id)
    return cp.ndarray(dims, dtype=input.dtype, memptr=cp.cuda.MemoryPointer(owned, 0))


def unset_data_ipc(tensor, shm_name, close_ipc, unlink_shm) -> None:
    """close_ipc: close the IPC handle ``tensor`` (from share_external_data) was attached
    through (every array over it becomes invalid, as upstream); unlink_shm: shm_unlink(shm_name).

    As the Paddle binding: everything that can be refused is checked before anything changes (the
    name, the attachment, then the unlink, which changes nothing when the name does not exist); the
    handle is closed last."""
    op = "unset_data_ipc"
    if unlink_shm:
        shm_name = _name(op, shm_name)
    hit = None
    if close_ipc:
        _device_array(op, "tensor", tensor)
        ptr = tensor.data.ptr
        with _lock:
            for key, ref in list(_opened.items()):
                mem = ref()
                if mem is None or mem.closed:
                    _opened.pop(key)
                    continue
                if mem.ptr <= ptr < mem.ptr + max(mem.size, 1):
                    hit = key, mem
                    break
        if hit is None:
            _fail(
                op,
                "tensor",
                "was not attached with share_external_data (or is already closed); "
                "close_ipc=True closes an attachment, never a producer's own array",
            )
    if unlink_shm:
        load().ipc_unlink(shm_name)
        with _lock:
            _published.pop(shm_name, None)
    if hit is not None:
        with _lock:
            _opened.pop(hit[0], None)
        hit[1].close()
