"""Schemas of the KV-cache sharing ops: spec ../shared/spec/ops.md §7.

Declared here for their signatures (fd_mtp.ops orders and type-checks the arguments with `invoke`;
the entry points' declarations in ops_gen.h must equal the hand-written ones in
custom_ops/paddle/ipc.cc) but ``binding=False``: the Paddle binding stays hand-written, because the
schema cannot say "any dtype" (every tensor here takes any paddle dtype: a KV cache of any type, or a
zero-size tensor that only carries the dtype / device) and a generated binding would refuse every
dtype it does not list. There is no kernel Params struct (``params=None``) and no numpy reference
(these ops move no data). fd_mtp.cuda's versions keep their own checks (CUDA IPC handles on CuPy
arrays, any dtype; see fd_mtp/cuda/ipc.py).

The dtype lists below are informational: the dtypes fd_mtp's callers use."""
from . import Attr, Op, Tensor

_ANY = "float32|float16|bfloat16|int64|int32|bool|uint8[]"  # any dtype, any shape (see above)

OPS = [
    Op(
        name="shared_empty",
        entry="SharedEmpty",
        spec="§7",
        params=None,
        returns=("out",),
        args=(
            Attr("shape", "int64[]", doc="the new tensor's shape (dims >= 0; at most physical memory)"),
            Tensor(
                "dtype",
                _ANY,
                cpu=True,
                param=None,
                doc="registered as input 'like': a zero-size CPU tensor of the new tensor's dtype, made by "
                "fd_mtp.ops.shared_empty from its dtype argument",
            ),
            Attr("name", "str", doc="the backing segment's POSIX name; '' for a generated /fd_mtp.<pid>.<n>"),
        ),
    ),
    Op(
        name="set_data_ipc",
        entry="SetDataIpc",
        spec="§7",
        params=None,
        args=(
            Tensor(
                "tensor",
                _ANY,
                "written",
                param=None,
                doc="read, declared in place as upstream; rank <= 8, contiguous; CPU: shared memory",
            ),
            Attr("shm_name", "str", doc="the publication's POSIX name"),
        ),
    ),
    Op(
        name="share_external_data",
        entry="ShareExternalData",
        spec="§7",
        params=None,
        returns=("out",),
        args=(
            Tensor("input", _ANY, param=None, doc="supplies only the result's dtype and device"),
            Attr("shm_name", "str", doc="a publication of set_data_ipc"),
            Attr("shape", "int64[]", doc="the result's shape; must fit the published bytes"),
        ),
    ),
    Op(
        name="unset_data_ipc",
        entry="UnsetDataIpc",
        spec="§7",
        params=None,
        args=(
            Tensor(
                "tensor",
                _ANY,
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
