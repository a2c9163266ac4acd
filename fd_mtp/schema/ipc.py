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

Schemas: every tensor here takes any dtype (``any[]``: a KV cache of any type, or a tensor that only
carries the dtype / device); there is no kernel Params struct (``params=None``: apply() takes only
the checked arguments). The generated binding checks contiguity and places; custom_ops/paddle/ipc.cc's
apply() functions keep the shared-memory and CUDA IPC work and their own checks; ``shm_name`` and
``shape`` resolve through fd_mtp.shm. fd_mtp.cuda's versions keep their own checks (CUDA IPC
handles on CuPy arrays; see fd_mtp/cuda/ipc.py).
"""

from . import Attr, Op, Tensor


def _shm_name(doc: str) -> Attr:
    return Attr("shm_name", "str", resolve="fd_mtp.shm:resolve_shm_name", doc=doc)


def _shape(doc: str) -> Attr:
    return Attr("shape", "int64[]", resolve="fd_mtp.shm:resolve_shape", doc=doc)


OPS = [
    Op(
        name="shared_empty",
        entry="SharedEmpty",
        kernel="ipc",
        spec="§7",
        params=None,
        place="dtype",  # its only tensor, on the CPU
        returns=("out",),
        args=(
            _shape("the new tensor's shape (dims >= 0; at most physical memory)"),
            Tensor(
                "dtype",
                "any[]",
                cpu=True,
                param=None,
                doc="a zero-size CPU tensor of the new tensor's dtype, made by fd_mtp.ops.shared_empty from "
                "its dtype argument (the op's input; upstream has no such op)",
            ),
            Attr(
                "name",
                "str",
                doc="the backing segment's POSIX name; '' for a generated /fd_mtp.<pid>.<n>",
            ),
        ),
    ),
    Op(
        name="set_data_ipc",
        entry="SetDataIpc",
        kernel="ipc",
        spec="§7",
        doc="""Publish ``tensor`` under POSIX shared-memory name ``shm_name`` (spec §7, producer).

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
        """,
        params=None,
        args=(
            Tensor(
                "tensor",
                "any[]",
                "written",
                param=None,
                doc="read, declared in place as upstream; rank <= 8; CPU: memory from shared_empty",
            ),
            _shm_name("the publication's POSIX name"),
        ),
    ),
    Op(
        name="share_external_data",
        entry="ShareExternalData",
        kernel="ipc",
        spec="§7",
        doc="""Attach to the tensor published under ``shm_name`` (spec §7, consumer; no copy).

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
        """,
        params=None,
        returns=("out",),
        args=(
            Tensor("input", "any[]", param=None, doc="supplies only the result's dtype and device"),
            _shm_name("a publication of set_data_ipc"),
            _shape("the result's shape; must fit the published bytes"),
        ),
    ),
    Op(
        name="unset_data_ipc",
        entry="UnsetDataIpc",
        kernel="ipc",
        spec="§7",
        doc="""Close an attachment and/or remove a publication (spec §7).

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
        """,
        params=None,
        args=(
            Tensor(
                "tensor",
                "any[]",
                "written",
                param=None,
                doc="read, declared in place as upstream; with close_ipc: an attachment",
            ),
            _shm_name("with unlink_shm: the publication to remove"),
            Attr("close_ipc", "bool"),
            Attr("unlink_shm", "bool"),
        ),
    ),
]
