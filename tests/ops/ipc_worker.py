"""The second process of tests/ops/test_ipc.py (started with multiprocessing's 'spawn').

`serve` runs fd_mtp.ops commands sent over a Pipe and answers each with ("ok", result) or
("err", exception type name, message); tensors stay alive in `held` between commands. Arrays
cross the pipe in their storage dtype (bfloat16 as uint16 bits). "exit" returns normally, so
the interpreter's normal exit (and fd_mtp's exit cleanup) runs.
"""

import sys


def to_storage(tensor):
    import paddle

    if tensor.dtype == paddle.bfloat16:
        return tensor.view(paddle.uint16).numpy()
    return tensor.numpy()


def from_storage(array, dtype):
    import paddle

    t = paddle.to_tensor(array, place=paddle.CPUPlace())
    return t.view(paddle.bfloat16) if dtype == "bfloat16" else t


def write_rows(tensor, lo, hi, array, dtype):
    """tensor[lo:hi] = array, in place (paddle's set_value writes into the tensor's memory)."""
    tensor[lo:hi] = from_storage(array, dtype)


def serve(conn, root):
    if root not in sys.path:
        sys.path.insert(0, root)
    import paddle

    import fd_mtp.ops as ops
    from fd_mtp.testing.child import serve_commands

    held = {}

    def handle(cmd, args):
        if cmd == "alloc":
            key, shape, dtype = args
            held[key] = ops.shared_zeros(shape, dtype)
        elif cmd == "publish":
            key, name = args
            ops.set_data_ipc(held[key], name)
        elif cmd == "attach":
            key, name, dtype, shape = args
            held[key] = ops.share_external_data(paddle.empty([0], dtype=dtype).cpu(), name, shape)
        elif cmd == "write":
            key, lo, hi, array, dtype = args
            write_rows(held[key], lo, hi, array, dtype)
        elif cmd == "read":
            (key,) = args
            return to_storage(held[key])
        elif cmd == "unset":
            key, name, close_ipc, unlink_shm = args
            ops.unset_data_ipc(held[key], name, close_ipc, unlink_shm)
        else:
            raise ValueError(f"unknown command {cmd!r}")
        return None

    serve_commands(conn, handle, held)
