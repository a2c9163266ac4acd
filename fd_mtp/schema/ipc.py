"""Schemas of the KV-cache sharing ops: spec ../shared/spec/ops.md §7.

Every tensor here takes any dtype (``any[]``: a KV cache of any type, or a tensor that only carries
the dtype / device); there is no kernel Params struct (``params=None``: apply() takes only the
checked arguments) and no numpy reference (these ops move no data). The generated binding checks
contiguity and places; custom_ops/paddle/ipc.cc's apply() functions keep the shared-memory and CUDA
IPC work and their own checks. fd_mtp.cuda's versions keep their own checks (CUDA IPC handles on CuPy
arrays; see fd_mtp/cuda/ipc.py)."""

from . import Attr, Op, Tensor

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
            Attr(
                "shape",
                "int64[]",
                doc="the new tensor's shape (dims >= 0; at most physical memory)",
            ),
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
        params=None,
        args=(
            Tensor(
                "tensor",
                "any[]",
                "written",
                param=None,
                doc="read, declared in place as upstream; rank <= 8; CPU: memory from shared_empty",
            ),
            Attr("shm_name", "str", doc="the publication's POSIX name"),
        ),
    ),
    Op(
        name="share_external_data",
        entry="ShareExternalData",
        kernel="ipc",
        spec="§7",
        params=None,
        returns=("out",),
        args=(
            Tensor("input", "any[]", param=None, doc="supplies only the result's dtype and device"),
            Attr("shm_name", "str", doc="a publication of set_data_ipc"),
            Attr("shape", "int64[]", doc="the result's shape; must fit the published bytes"),
        ),
    ),
    Op(
        name="unset_data_ipc",
        entry="UnsetDataIpc",
        kernel="ipc",
        spec="§7",
        params=None,
        args=(
            Tensor(
                "tensor",
                "any[]",
                "written",
                param=None,
                doc="read, declared in place as upstream; with close_ipc: an attachment",
            ),
            Attr("shm_name", "str", doc="with unlink_shm: the publication to remove"),
            Attr("close_ipc", "bool"),
            Attr("unlink_shm", "bool"),
        ),
    ),
]
