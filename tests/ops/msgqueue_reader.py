"""A reader process for tests/ops/test_msgqueue.py: receives messages from a SysV queue the way the
token processor does, in a separate process, and sends back what it read.

Two ways to read:
* "op":  fd_mtp.ops.speculate_get_output(_dynamic) into an int64 tensor (our reader);
* "raw": libc msgrcv through ctypes into a byte buffer larger than a message, returning mtype, the
  byte count and the bytes, so the wire layout is checked independently of fd_mtp.

Requests and replies are tuples over a multiprocessing Pipe (see `serve`).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import importlib
import os

import numpy as np

IPC_NOWAIT = 0o4000
RAW_CAPACITY = 8192  # bytes; more than one message (7176) so a longer message would show


class _RawMsg(ctypes.Structure):
    _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_char * RAW_CAPACITY)]


def sysv_libc():
    """libc through ctypes, with ftok / msgget / msgrcv typed (also the tests' handle on the queues)."""
    libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
    libc.ftok.restype = ctypes.c_int
    libc.ftok.argtypes = (ctypes.c_char_p, ctypes.c_int)
    libc.msgget.restype = ctypes.c_int
    libc.msgget.argtypes = (ctypes.c_int, ctypes.c_int)
    libc.msgrcv.restype = ctypes.c_ssize_t
    libc.msgrcv.argtypes = (
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_long,
        ctypes.c_int,
    )
    return libc


def raw_receive(ftok_path: str, msg_queue_id: int, wait: bool):
    """("msg", mtype, nbytes, bytes) or ("none", errno) from libc msgrcv (any mtype)."""
    libc = sysv_libc()
    key = libc.ftok(os.fsencode(ftok_path), msg_queue_id)
    queue = libc.msgget(key, 0)
    if queue == -1:
        return ("none", ctypes.get_errno())
    msg = _RawMsg()
    got = libc.msgrcv(queue, ctypes.byref(msg), RAW_CAPACITY, 0, 0 if wait else IPC_NOWAIT)
    if got == -1:
        return ("none", ctypes.get_errno())
    data = ctypes.string_at(ctypes.addressof(msg) + _RawMsg.mtext.offset, got)
    return ("msg", int(msg.mtype), int(got), data)


def op_receive(ftok_path, msg_queue_id, rank_id, wait_flag, get_each_rank, fill, dynamic, shape):
    """("x", values) after fd_mtp.ops.speculate_get_output on an int64 tensor full of `fill`, or
    ("error", exception type name, errno, message)."""
    import paddle

    from fd_mtp import ops

    x = paddle.full(shape, fill, dtype="int64")
    try:
        if dynamic:
            ops.speculate_get_output_dynamic(
                x, rank_id, wait_flag, msg_queue_id, get_each_rank, ftok_path=ftok_path
            )
        else:
            ops.speculate_get_output(
                x, rank_id, wait_flag, get_each_rank, msg_queue_id=msg_queue_id, ftok_path=ftok_path
            )
    except Exception as exc:  # reported to the test, which decides
        return ("error", type(exc).__name__, getattr(exc, "errno", None), str(exc))
    return ("x", np.asarray(x.numpy()).reshape(-1).copy())


def serve(conn) -> None:
    """Answer requests until "quit": ("raw", path, id, wait) or ("op", path, id, rank_id,
    wait_flag, get_each_rank, fill, dynamic, shape)."""
    importlib.import_module("paddle")  # import once, before the first timed request

    conn.send(("ready",))
    while True:
        request = conn.recv()
        kind, args = request[0], request[1:]
        if kind == "quit":
            return
        if kind == "raw":
            conn.send(raw_receive(*args))
        elif kind == "op":
            conn.send(op_receive(*args))
        else:
            conn.send(("error", "KeyError", None, f"unknown request {kind!r}"))
