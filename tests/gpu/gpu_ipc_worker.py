"""The second process of tests/gpu/test_gpu_ipc.py (multiprocessing 'spawn'): runs fd_mtp.cuda
IPC commands on CuPy arrays sent over a Pipe, answering ("ok", result) or ("err", type, message).
Arrays cross the pipe as numpy; "exit" returns normally (atexit handlers run)."""

import sys


def serve(conn, root):
    if root not in sys.path:
        sys.path.insert(0, root)
    import cupy as cp
    import numpy as np

    import fd_mtp.cuda as fcuda
    from fd_mtp.testing.child import serve_commands

    held = {}

    def handle(cmd, args):
        if cmd == "alloc":  # a fresh cudaMalloc allocation (offset 0), zero-filled
            key, shape, dtype = args
            nbytes = int(np.prod(shape)) * np.dtype(dtype).itemsize
            mem = cp.cuda.Memory(nbytes)
            held[key] = cp.ndarray(shape, dtype, cp.cuda.MemoryPointer(mem, 0))
            held[key][...] = 0
        elif cmd == "put":  # a new array holding `array`
            key, array = args
            held[key] = cp.asarray(array)
        elif cmd == "publish":
            key, name = args
            fcuda.set_data_ipc(held[key], name)
        elif cmd == "attach":
            key, name, dtype, shape = args
            held[key] = fcuda.share_external_data(cp.empty(1, dtype), name, shape)
        elif cmd == "write":
            key, lo, hi, array = args
            held[key][lo:hi] = cp.asarray(array)
            cp.cuda.get_current_stream().synchronize()
        elif cmd == "read":
            (key,) = args
            return cp.asnumpy(held[key])
        elif cmd == "unset":
            key, name, close_ipc, unlink_shm = args
            fcuda.unset_data_ipc(held.get(key), name, close_ipc, unlink_shm)
        else:
            raise ValueError(f"unknown command {cmd!r}")
        return None

    serve_commands(conn, handle, held)
