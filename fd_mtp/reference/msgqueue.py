"""Numpy references of the output-message ops (spec ../shared/spec/ops.md §5.11, §6.8).

The ops send a SysV message; the references return the message payload they would send, as an
int32 array of ``MESSAGE_INTS`` words (None when the rank sends nothing), so a test can compare it
with what a reader received. Layout::

    mtext[0] = +msg_id if not_need_stop else -msg_id
    mtext[1] = bs
    mtext[2 + i]             count of request i, i < 256 (0 for i >= bs)
    mtext[258 + 6 * i + j]   token j of request i, j < 6 (0 for i >= bs)

Signatures are the ops' (fd_mtp/schema/msgqueue.py). The senders take ``msg_queue_id`` and
``ftok_path`` but send nothing; ``msg_id=None`` resolves as the ops' (``INFERENCE_MSG_ID`` or 1,
through fd_mtp.ops.msgqueue.resolve_msg_id). `speculate_get_output` receives from the real queue with
libc's ``msgrcv`` (ctypes) and writes ``x`` as the op does; `speculate_get_output_from_message` is the
same given the message (the libc calls are fd_mtp.sysv_queue's queue helpers, which need no
paddle).
"""

import numpy as np

from ..schema import resolve_kw

__all__ = [
    "speculate_save_output",
    "mtp_save_first_token",
    "speculate_get_output",
]


MAX_BSZ = 256
MAX_DRAFT_TOKENS = 6
MESSAGE_INTS = 2 + MAX_BSZ + MAX_BSZ * MAX_DRAFT_TOKENS
_TOKENS = 2 + MAX_BSZ


def _dtype(name, a, dtype):
    if not isinstance(a, np.ndarray) or a.dtype != dtype:
        got = a.dtype if isinstance(a, np.ndarray) else type(a).__name__
        raise ValueError(f"{name} must be {np.dtype(dtype).name}, got {got}")


def _rows(name, a, min_cols):
    _dtype(name, a, np.int64)
    if a.ndim != 2:
        raise ValueError(f"{name} must be 2-D [bsz, cols], got shape {list(a.shape)}")
    if a.shape[1] < min_cols:
        raise ValueError(f"{name} needs at least {min_cols} columns, got shape {list(a.shape)}")
    if a.shape[0] > MAX_BSZ:
        raise ValueError(
            f"{name} has {a.shape[0]} rows but a message holds at most {MAX_BSZ} requests"
        )
    return a.shape[0]


def _per_request(name, a, dtype, bsz):
    _dtype(name, a, dtype)
    if not (a.ndim == 1 or (a.ndim == 2 and a.shape[1] == 1)):
        raise ValueError(f"{name} must have shape [bsz] or [bsz, 1], got {list(a.shape)}")
    if a.shape[0] < bsz:
        raise ValueError(f"{name} has {a.shape[0]} entries but the batch has {bsz} requests")
    return a.reshape(-1)[:bsz]


def _flag(not_need_stop):
    _dtype("not_need_stop", not_need_stop, np.bool_)
    if not_need_stop.size != 1:
        raise ValueError(
            f"not_need_stop must hold exactly one element, got {list(not_need_stop.shape)}"
        )
    return bool(not_need_stop.reshape(-1)[0])


def _msg_id(msg_id):
    """``msg_id`` validated, or the environment default when None (as the ops resolve it)."""
    from ..sysv_queue import resolve_msg_id

    return resolve_msg_id(msg_id)


def _header(msg_id, go_on, bsz):
    msg = np.zeros(MESSAGE_INTS, dtype=np.int32)
    msg[0] = msg_id if go_on else -msg_id
    msg[1] = bsz
    return msg


def speculate_save_output(
    accept_tokens,
    accept_num,
    not_need_stop,
    seq_lens_decoder,
    prompt_lens,
    rank_id,
    save_each_rank,
    skip_prefill,
    *,
    msg_queue_id=None,
    msg_id=None,
    ftok_path=None,
):
    """The payload `fd_mtp.ops.speculate_save_output` sends (int32 ``[1794]``), or None.

    ``msg_queue_id`` and ``ftok_path`` are accepted for the op's signature and not used (nothing is
    sent)."""
    msg_id = _msg_id(msg_id)
    bsz = _rows("accept_tokens", accept_tokens, 0)
    num = _per_request("accept_num", accept_num, np.int32, bsz)
    dec = _per_request("seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    prompt = _per_request("prompt_lens", prompt_lens, np.int64, bsz)
    go_on = _flag(not_need_stop)
    width = min(accept_tokens.shape[1], MAX_DRAFT_TOKENS)  # narrower rows: zeros after W
    in_prompt = [bool(skip_prefill) and int(dec[i]) < int(prompt[i]) for i in range(bsz)]
    for i in range(bsz):  # a sent count must fit the slot and the row
        if not in_prompt[i] and not 0 <= int(num[i]) <= width:
            raise ValueError(
                f"accept_num (request {i}) is {int(num[i])} but must be in [0, {width}]"
            )
    if not save_each_rank and rank_id > 0:
        return None
    msg = _header(msg_id, go_on, bsz)
    for i in range(bsz):
        msg[2 + i] = 0 if in_prompt[i] else num[i]
        tokens = accept_tokens[i, :width].astype(np.int64)
        # int64 -> int32 wraps like the C cast
        msg[_TOKENS + MAX_DRAFT_TOKENS * i : _TOKENS + MAX_DRAFT_TOKENS * i + width] = (
            tokens.astype(np.uint64).astype(np.uint32).view(np.int32)
        )
    return msg


def mtp_save_first_token(
    x,
    not_need_stop,
    seq_lens_decoder,
    prompt_lens,
    step_idx,
    rank_id,
    save_each_rank,
    skip_chunk_prefill,
    *,
    msg_queue_id=None,
    msg_id=None,
    ftok_path=None,
):
    """The payload `fd_mtp.ops.mtp_save_first_token` sends (int32 ``[1794]``), or None.

    Slots are zero unless written (the op's deliberate difference from upstream's stale slots).
    ``msg_queue_id`` and ``ftok_path`` are accepted for the op's signature and not used.
    """
    msg_id = _msg_id(msg_id)
    bsz = _rows("x", x, 2)
    dec = _per_request("seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    prompt = _per_request("prompt_lens", prompt_lens, np.int64, bsz)
    step = _per_request("step_idx", step_idx, np.int64, bsz)
    go_on = _flag(not_need_stop)
    if not save_each_rank and rank_id > 0:
        return None
    msg = _header(msg_id, go_on, bsz)
    for i in range(bsz):
        if skip_chunk_prefill and int(dec[i]) < int(prompt[i]):
            continue
        if step[i] == 1:
            msg[2 + i] = 2
            pair = x[i, :2].astype(np.uint64).astype(np.uint32).view(np.int32)
            msg[_TOKENS + MAX_DRAFT_TOKENS * i : _TOKENS + MAX_DRAFT_TOKENS * i + 2] = pair
    return msg


def _check_x(x):
    _dtype("x", x, np.int64)
    if x.size < MESSAGE_INTS:
        raise ValueError(f"x needs at least {MESSAGE_INTS} elements, got shape {list(x.shape)}")


def speculate_get_output_from_message(x, message, rank_id=0, get_each_rank=False):
    """What `fd_mtp.ops.speculate_get_output` writes into ``x`` (int64, flat >= 1794) given the
    next queued ``message`` (int32 ``[1794]``, or None for an empty queue in non-blocking mode).

    Returns True when the message was consumed (x written with it), False otherwise.
    """
    _check_x(x)
    if not get_each_rank and rank_id > 0:
        return False
    flat = x.reshape(-1)  # a view for contiguous x
    if message is None:
        flat[0], flat[1] = -2, 0
        return False
    flat[:MESSAGE_INTS] = np.asarray(message, dtype=np.int32)
    return True


def speculate_get_output(
    x, rank_id, wait_flag, get_each_rank, *, msg_queue_id=None, ftok_path=None
):
    """`fd_mtp.ops.speculate_get_output` with libc's ``msgrcv``: receives the next message of the
    queue (``msg_queue_id`` None: ``INFERENCE_MSG_QUEUE_ID`` or 1; ``ftok_path`` None: ``"./"``),
    blocking when ``wait_flag``, and writes it into ``x`` (numpy int64, flat >= 1794) as the op
    does (`speculate_get_output_from_message`). Nothing is received when ``rank_id > 0`` and not
    ``get_each_rank``. Returns True when a message was consumed."""
    from ..sysv_queue import receive_message  # libc msgrcv through ctypes

    _check_x(x)
    if not get_each_rank and rank_id > 0:
        return False
    msg_queue_id = resolve_kw("speculate_get_output", "msg_queue_id", msg_queue_id)
    message = receive_message(msg_queue_id, ftok_path=ftok_path, wait=bool(wait_flag))
    return speculate_get_output_from_message(x, message)
