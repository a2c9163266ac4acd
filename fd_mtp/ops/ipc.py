"""KV-cache sharing between processes: spec ../shared/spec/ops.md §7.

FastDeploy's cache manager and its model workers (and the MTP proposer) share
KV-cache tensors: a producer publishes a tensor under a POSIX shared-memory name
with ``set_data_ipc``, a consumer in another process attaches to it with
``share_external_data`` (no copy: both processes then read and write the same
memory), and ``unset_data_ipc`` undoes either side.

* GPU tensors: as upstream, the segment ``shm_name`` holds the CUDA IPC handle
  (``cudaIpcGetMemHandle``); the consumer opens it with ``cudaIpcOpenMemHandle``
  (``cudaIpcMemLazyEnablePeerAccess``) and wraps the pointer (``paddle::from_blob``).
  The segment starts with FastDeploy's 72-byte ``shmStruct``, so either side may
  be FastDeploy's own op. (CuPy versions of the GPU path: ``fd_mtp.cuda``.)
* CPU tensors: the memory itself must be POSIX shared memory, which paddle's
  allocator never gives; allocate such a tensor with :func:`shared_empty` /
  :func:`shared_zeros` (its memory is a segment ``/fd_mtp.<pid>.<n>``, or the
  ``name`` you give). ``set_data_ipc`` then writes, in segment ``shm_name``, a
  small header naming that backing segment, the tensor's byte offset and size,
  dtype and shape; ``share_external_data`` maps the backing segment.

The segment layout is in custom_ops/kernels/ipc.h.

Lifetime and ownership rules
----------------------------
1. **Backing segments** (CPU) belong to the process that called ``shared_empty``.
   Their name is removed (``shm_unlink``) when paddle frees that tensor (its last
   reference, views included) or when that process exits normally, whichever
   comes first. POSIX keeps the memory while any process has it mapped, so
   consumers that already attached keep working after the producer frees the
   tensor or exits; attaching after that fails (ValueError: the backing segment
   "does not exist ... its producer freed the tensor or exited").
2. **Publications** (segment ``shm_name``) belong to the process that called
   ``set_data_ipc``; publishing again under the same name replaces the record.
   The name is removed by ``unset_data_ipc(..., unlink_shm=True)`` (any process
   may call it) or when the publisher exits normally. A publication does not keep
   the tensor alive: keep the producer's tensor referenced while consumers may
   attach (on a GPU, a freed tensor's memory may be reused by paddle's allocator
   and an attachment would then see other data, as upstream).
3. **Attachments** (the tensor ``share_external_data`` returns) own their
   mapping: CPU, an ``mmap`` of the backing segment; GPU, an opened IPC handle
   (opened once per process and handle, shared by later attachments). It is
   released when paddle frees the returned tensor, or earlier by
   ``unset_data_ipc(tensor, ..., close_ipc=True)``. A GPU attachment is valid
   only while the exporting process lives (CUDA frees the memory when it exits);
   a CPU attachment survives the producer's exit.
4. A process killed by a signal or ending with ``os._exit`` removes nothing: its
   names stay in /dev/shm until ``unset_data_ipc(t, name, False, True)`` or
   ``rm /dev/shm/<name>``. A forked child inherits the parent's mappings but owns
   none of its names.

Deliberate differences from upstream
------------------------------------
* Errors raise ValueError naming the argument (a missing ``shm_name``, an invalid
  name, a ``shape`` that does not fit the published tensor); upstream exits the
  process or prints and continues. Names are validated (no '/' after the
  leading one, at most 255 characters). A name without the leading '/', as
  FastDeploy passes them (``key_caches_{layer}_rank{r}.device{d}``), gets one,
  as glibc's shm_open does, so both spellings name the same /dev/shm entry.
* CPU tensors can be shared (upstream: GPU only).
* Segments are created with mode 0600 (upstream 0777): same-user processes only.
* The GPU record also stores the tensor's offset inside its CUDA allocation (a
  tensor need not start its allocation) and its size, so ``share_external_data``
  checks that ``shape`` fits. FastDeploy's bare record (offset 0) is accepted.
* The returned tensor closes its IPC handle / unmaps when freed (upstream never
  closes unless ``unset_data_ipc(close_ipc=True)`` is called).
* ``unset_data_ipc(close_ipc=True)`` on a CPU attachment replaces its shared pages
  by private zero pages (the tensor stays addressable but shares nothing); on a
  tensor that is not an attachment it raises ValueError (upstream: a CUDA error).
* Names beginning ``/fd_mtp.`` are reserved for backing segments.

These ops move no data, so there is no numpy reference for them in
fd_mtp.reference; tests/ops/test_ipc.py checks them with two real processes.
Arguments and the generated binding: fd_mtp/schema/ipc.py; the work:
custom_ops/paddle/ipc.cc.
"""

from __future__ import annotations

from ._composite import renamed, require_int_list
from ._loader import invoke

__all__ = [
    "shared_empty",
    "shared_zeros",
    "set_data_ipc",
    "share_external_data",
    "unset_data_ipc",
]


def _shape(op, arg, shape):
    """``shape`` as a list of ints >= 0, else ValueError naming ``arg`` (ints only: a float, a
    bool or a str element is refused, not converted; the ipc ops raise ValueError for every bad
    argument, as upstream's checks did)."""
    try:
        dims = require_int_list(op, arg, shape)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    if any(d < 0 for d in dims):
        raise ValueError(f"{op}: {arg} must have non-negative dimensions, got {dims}")
    return dims


def _name(op, arg, name):
    if not isinstance(name, str):
        raise ValueError(f"{op}: {arg} must be a str, got {type(name).__name__}")
    return posix_name(name)


def posix_name(name: str) -> str:
    """FastDeploy's names have no leading '/' (glibc's shm_open adds it); add it the same way,
    so ``"key_caches_0_rank0.device0"`` and ``"/key_caches_0_rank0.device0"`` are one segment."""
    return name if name.startswith("/") or not name else "/" + name


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


def shared_empty(shape, dtype="float32", name=None):
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
            the tensor is freed or this process exits (see the module docstring).

    Returns:
        A CPU ``paddle.Tensor`` of ``shape`` and ``dtype`` (not an fd_mtp-specific
        type: every paddle op works on it in place).

    Example:
        >>> import fd_mtp.ops as ops
        >>> t = ops.shared_empty([2, 3], "float32")
        >>> list(t.shape), t.place.is_cpu_place(), float(t.sum())
        ([2, 3], True, 0.0)
    """
    op = "shared_empty"
    shape = _shape(op, "shape", shape)
    if name is None:
        name = ""
    elif not isinstance(name, str) or not name:
        raise ValueError(f"{op}: name must be a non-empty str or None, got {name!r}")
    dtype = _dtype_carrier(op, dtype)  # the op's input: a zero-size CPU tensor of the dtype
    return invoke(op, locals())[0]


def shared_zeros(shape, dtype="float32", name=None):
    """Like :func:`shared_empty`; the contents are zero (a new segment is zero-filled).

    Example:
        >>> import fd_mtp.ops as ops
        >>> ops.shared_zeros([2], "int32").tolist()
        [0, 0]
    """
    with renamed("shared_zeros", "shared_empty", alias=True):
        return shared_empty(shape, dtype, name)


def set_data_ipc(tensor, shm_name) -> None:
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
    # Paddle hands a custom op a contiguous copy of a strided view: refuse it here,
    # before that copy would be (wrongly) reported as memory that is not shared.
    if hasattr(tensor, "is_contiguous") and not tensor.is_contiguous():
        raise ValueError(
            "set_data_ipc: tensor must be contiguous (a consumer sees the published bytes in "
            f"row-major order), got a strided view of shape {list(tensor.shape)}"
        )
    shm_name = _name("set_data_ipc", "shm_name", shm_name)
    invoke("set_data_ipc", locals())


def share_external_data(input, shm_name, shape):
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
    op = "share_external_data"
    shape = _shape(op, "shape", shape)
    shm_name = _name(op, "shm_name", shm_name)
    return invoke(op, locals())[0]


def unset_data_ipc(tensor, shm_name, close_ipc, unlink_shm) -> None:
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
    shm_name = _name("unset_data_ipc", "shm_name", shm_name)
    invoke("unset_data_ipc", locals())
