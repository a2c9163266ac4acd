"""SysV message-queue helpers of the output-message ops (spec ../shared/spec/ops.md §5.11, §6.8),
with no paddle: the wire constants (FastDeploy's layout), the queue / message id resolution (from
fd_mtp.envs), ``ftok`` keys, and libc ``msgrcv`` / ``msgctl`` through ctypes. The ops
(fd_mtp/schema/msgqueue.py resolves their keyword arguments here) and fd_mtp.reference.msgqueue
both use them.

Wire format (FastDeploy's, shared with every reader): ``long mtype = 1`` followed by
``int32 mtext[MESSAGE_INTS]``, ``MESSAGE_INTS = 2 + MAX_BSZ + MAX_BSZ * MAX_DRAFT_TOKENS`` = 1794::

    mtext[0]                      +msg_id, or -msg_id when not_need_stop is False
    mtext[1]                      bs, the number of requests in the batch
    mtext[2 + i]                  count of request i (i < 256; 0 for i >= bs)
    mtext[258 + 6 * i + j]        token j of request i (j < 6; 0 for i >= bs)

The queue is ``msgget(ftok(ftok_path, msg_queue_id), IPC_CREAT | 0666)``. Upstream always uses
``ftok("./", id)``, so the key depends on the process's current directory (its device and inode
number, not its name) and only on the low 8 bits of ``msg_queue_id`` (ids 1 and 257 name the same
queue). Writer and reader must therefore agree on both; ``ftok_path`` (keyword, default ``"./"``)
makes the directory explicit.

What upstream read from the environment is resolved here, in Python, and passed to the op as an
attribute: ``msg_queue_id=None`` means ``INFERENCE_MSG_QUEUE_ID`` (default 1, read by fd_mtp.envs)
and ``msg_id=None`` means ``INFERENCE_MSG_ID`` (default 1; 2 and negative ids are reserved and raise
ValueError); ``ftok_path=None`` means ``"./"``. Bad arguments raise ValueError naming the argument,
before anything is sent. A failing ``msgget`` / ``msgsnd`` / ``msgrcv`` (for example EINTR when a
signal interrupts a blocked call, EIDRM when the queue is removed) raises OSError with the system's
message (upstream printed "full msg buffer" and carried on, or reported "no message")."""

from __future__ import annotations

import ctypes
import ctypes.util
import errno as _errno
import operator
import os

from . import envs

MAX_BSZ = 256
MAX_DRAFT_TOKENS = 6
MESSAGE_INTS = 2 + MAX_BSZ + MAX_BSZ * MAX_DRAFT_TOKENS  # 1794
MESSAGE_BYTES = 4 * MESSAGE_INTS  # 7176: the size given to msgsnd / msgrcv
DEFAULT_FTOK_PATH = "./"
#: requests per top-k message upstream (MAX_BSZ of speculate_save_output_with_topk.cc)
TOPK_DEFAULT_MAX_BSZ = 512
#: the directory upstream's top-k ops key their queue with (``ftok("/dev/shm", id)``)
TOPK_FTOK_PATH = "/dev/shm"

_INT32_MAX = 2**31 - 1


def _as_int(name: str, value) -> int:
    if isinstance(value, bool):
        raise ValueError(f"{name} must be an int, got bool")
    try:
        return operator.index(value)
    except TypeError:
        raise ValueError(f"{name} must be an int, got {type(value).__name__}") from None


def resolve_msg_queue_id(msg_queue_id=None) -> int:
    """The queue id an op uses: ``msg_queue_id``, else ``$INFERENCE_MSG_QUEUE_ID``, else 1."""
    source = "msg_queue_id"
    if msg_queue_id is None:
        msg_queue_id, source = envs.get("INFERENCE_MSG_QUEUE_ID"), "INFERENCE_MSG_QUEUE_ID"
    msg_queue_id = _as_int("msg_queue_id", msg_queue_id)
    if not -_INT32_MAX - 1 <= msg_queue_id <= _INT32_MAX:
        raise ValueError(f"{source} must fit in int32, got {msg_queue_id}")
    return msg_queue_id


def resolve_msg_id(msg_id=None) -> int:
    """The message id an op sends: ``msg_id``, else ``$INFERENCE_MSG_ID``, else 1.

    Raises ValueError for 2 (readers take -2 as "no output") and for negative ids, like upstream.
    """
    source = "msg_id"
    if msg_id is None:
        msg_id, source = envs.get("INFERENCE_MSG_ID"), "msg_id (from INFERENCE_MSG_ID)"
    msg_id = _as_int("msg_id", msg_id)
    if msg_id == 2:
        raise ValueError(f"{source} cannot be 2: 2 and -2 are reserved for 'no output'")
    if msg_id < 0:
        raise ValueError(f"{source} cannot be negative, got {msg_id}")
    if msg_id > _INT32_MAX:
        raise ValueError(f"{source} must fit in int32, got {msg_id}")
    return msg_id


def resolve_ftok_path(ftok_path) -> str:
    """``ftok_path`` as a str (None: ``"./"``, upstream's)."""
    if ftok_path is None:
        return DEFAULT_FTOK_PATH
    try:
        return os.fspath(ftok_path)
    except TypeError:
        raise ValueError(f"ftok_path must be a path, got {type(ftok_path).__name__}") from None


def resolve_topk_ftok_path(path) -> str:
    """The top-k ops' ``ftok_path`` as a str (None: ``"/dev/shm"``, upstream's)."""
    return resolve_ftok_path(TOPK_FTOK_PATH if path is None else path)


def resolve_topk_max_bsz(max_bsz):
    """The top-k ops' ``max_bsz`` (None: 512, upstream's layout); the op checks its range."""
    return TOPK_DEFAULT_MAX_BSZ if max_bsz is None else max_bsz


def topk_message_bytes(max_bsz: int = TOPK_DEFAULT_MAX_BSZ) -> int:
    """Bytes ``msgsnd`` / ``msgrcv`` move for a top-k message of ``max_bsz`` requests:
    ``sizeof(struct msgdata) - sizeof(long)``, i.e. ``3 + max_bsz`` meta words, ``max_bsz``
    slots of 258 words and the struct's tail padding (530448 for upstream's 512)."""
    words = 3 + max_bsz + max_bsz * 258
    return 4 * (words + words % 2)


_IPC_RMID = 0


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)


def queue_key(msg_queue_id: int | None = None, *, ftok_path: str = DEFAULT_FTOK_PATH) -> int:
    """The SysV key ``ftok(ftok_path, msg_queue_id)`` the ops use (msg_queue_id resolved as theirs)."""
    libc = _libc()
    libc.ftok.restype = ctypes.c_int
    libc.ftok.argtypes = (ctypes.c_char_p, ctypes.c_int)
    key = libc.ftok(os.fsencode(resolve_ftok_path(ftok_path)), resolve_msg_queue_id(msg_queue_id))
    if key == -1:
        err = ctypes.get_errno()
        raise ValueError(f"ftok_path {ftok_path!r} cannot key a queue: {os.strerror(err)}")
    return key


_IPC_CREAT, _IPC_NOWAIT = 0o1000, 0o4000


def receive_message(msg_queue_id=None, *, ftok_path=DEFAULT_FTOK_PATH, wait=False, words=None):
    """The next message of the queue the ops would use, received with libc's ``msgrcv`` (any mtype;
    no paddle): its ``words`` (default ``MESSAGE_INTS``) int32 words as a numpy array (a shorter
    message is zero-padded), or None when ``wait`` is False and the queue is empty. The queue is
    created if missing, as the ops do. A failing ``msgget`` / ``msgrcv`` raises OSError.

    fd_mtp.reference.speculate_get_output (and ``_topk``, with the top-k message's size) read the
    queue with it.
    """
    import numpy as np

    libc = _libc()
    key = queue_key(msg_queue_id, ftok_path=ftok_path)
    libc.msgget.restype = ctypes.c_int
    libc.msgget.argtypes = (ctypes.c_int, ctypes.c_int)
    queue = libc.msgget(key, _IPC_CREAT | 0o666)
    if queue == -1:
        err = ctypes.get_errno()
        raise OSError(err, f"msgget of key {key:#010x}: {os.strerror(err)}")
    libc.msgrcv.restype = ctypes.c_ssize_t
    libc.msgrcv.argtypes = (
        ctypes.c_int,
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_long,
        ctypes.c_int,
    )
    n = MESSAGE_INTS if words is None else int(words)

    class Message(ctypes.Structure):
        _fields_ = [("mtype", ctypes.c_long), ("mtext", ctypes.c_int32 * n)]

    msg = Message()  # zero-filled
    if libc.msgrcv(queue, ctypes.byref(msg), 4 * n, 0, 0 if wait else _IPC_NOWAIT) == -1:
        err = ctypes.get_errno()
        if not wait and err == _errno.ENOMSG:
            return None
        raise OSError(err, f"msgrcv of key {key:#010x}: {os.strerror(err)}")
    return np.ctypeslib.as_array(msg.mtext).astype(np.int32)


def claim_queue_id(start: int, *, ftok_path=DEFAULT_FTOK_PATH) -> int:
    """The first queue id from ``start`` on whose SysV key has no queue; its queue is created
    (``IPC_CREAT | IPC_EXCL``: claimed atomically, so two owners never share one). ftok keeps
    8 bits of the id: 256 keys per ftok path. OSError when every one is in use."""
    libc = _libc()
    libc.msgget.restype = ctypes.c_int
    libc.msgget.argtypes = (ctypes.c_int, ctypes.c_int)
    for i in range(256):
        qid = start + i
        if libc.msgget(queue_key(qid, ftok_path=ftok_path), 0o1000 | 0o2000 | 0o666) != -1:
            return qid
        err = ctypes.get_errno()
        if err != _errno.EEXIST:
            raise OSError(err, f"msgget of queue id {qid}: {os.strerror(err)}")
    raise OSError(
        _errno.ENOSPC,
        f"the 256 SysV queue keys from msg_queue_id {start} on are all in use: remove stale "
        "queues (ipcs -q / ipcrm) or pass msg_queue_id",
    )


def remove_queue(msg_queue_id: int | None = None, *, ftok_path: str = DEFAULT_FTOK_PATH) -> bool:
    """Remove the queue the ops would use (``msgctl(IPC_RMID)``), discarding pending messages.

    Returns True when a queue was removed, False when none existed. A process blocked on the queue
    wakes up with EIDRM (our ops raise OSError).
    """
    libc = _libc()
    key = queue_key(msg_queue_id, ftok_path=ftok_path)
    libc.msgget.restype = ctypes.c_int
    libc.msgget.argtypes = (ctypes.c_int, ctypes.c_int)
    queue = libc.msgget(key, 0)
    if queue == -1:
        err = ctypes.get_errno()
        if err == _errno.ENOENT:
            return False
        raise OSError(err, f"msgget of key {key:#010x}: {os.strerror(err)}")
    libc.msgctl.restype = ctypes.c_int
    libc.msgctl.argtypes = (ctypes.c_int, ctypes.c_int, ctypes.c_void_p)
    if libc.msgctl(queue, _IPC_RMID, None) == -1:
        err = ctypes.get_errno()
        if err in (_errno.EINVAL, _errno.EIDRM):  # removed meanwhile by someone else
            return False
        raise OSError(err, f"msgctl(IPC_RMID) of key {key:#010x}: {os.strerror(err)}")
    return True
