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
through fd_mtp.sysv_queue.resolve_msg_id). `speculate_get_output` receives from the real queue with
libc's ``msgrcv`` (ctypes) and writes ``x`` as the op does; `speculate_get_output_from_message` is the
same given the message (the libc calls are fd_mtp.sysv_queue's queue helpers, which need no
paddle).
"""

import numpy as np

from ..schema import resolve_kw
from ..sysv_queue import TOPK_DEFAULT_MAX_BSZ, TOPK_FTOK_PATH

__all__ = [
    "speculate_save_output",
    "mtp_save_first_token",
    "speculate_get_output",
    "speculate_save_output_topk",
    "speculate_get_output_topk",
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


# --------------------------------------------------------------------------------------------
# Top-k (logprob) messages (docs/spec/logprobs.md)
# --------------------------------------------------------------------------------------------
TOPK_K = 20
TOPK_COLUMNS = TOPK_K + 1  # the sampled token, then the top 20
TOPK_MAX_TOKENS = 6
TOPK_SLOT_ENTRIES = TOPK_MAX_TOKENS * TOPK_COLUMNS  # 126
TOPK_SLOT_WORDS = 2 * TOPK_SLOT_ENTRIES + TOPK_MAX_TOKENS  # 258


def topk_sent_words(max_bsz):
    """int32 words of a top-k message of ``max_bsz`` slots as msgsnd sends it: ``3 + max_bsz``
    meta words, the slots, and one zero word of struct padding when their count is odd."""
    words = 3 + max_bsz + max_bsz * TOPK_SLOT_WORDS
    return words + words % 2


def _max_bsz(max_bsz):
    max_bsz = TOPK_DEFAULT_MAX_BSZ if max_bsz is None else int(max_bsz)
    if not 1 <= max_bsz <= TOPK_DEFAULT_MAX_BSZ:
        raise ValueError(f"max_bsz must be in [1, {TOPK_DEFAULT_MAX_BSZ}], got {max_bsz}")
    return max_bsz


def _wrap32(values):
    """int64 -> int32 as the C cast (two's complement wrap)."""
    return np.asarray(values, np.int64).astype(np.uint64).astype(np.uint32).view(np.int32)


def speculate_save_output_topk(
    sampled_token_ids,
    logprob_token_ids,
    logprob_scores,
    logprob_ranks,
    token_num_per_batch,
    cu_batch_token_offset,
    not_need_stop,
    seq_lens_decoder,
    prompt_lens,
    message_flag,
    rank_id,
    save_each_rank,
    *,
    msg_queue_id=None,
    msg_id=None,
    ftok_path=None,
    max_bsz=None,
):
    """The payload `fd_mtp.ops.speculate_save_output_topk` sends, as int32 words
    (``topk_sent_words(max_bsz)``; float32 scores as their bit patterns), or None when the rank
    sends nothing. ``msg_queue_id`` and ``ftok_path`` are accepted for the op's signature."""
    msg_id = _msg_id(msg_id)
    max_bsz = _max_bsz(max_bsz)
    _dtype("token_num_per_batch", token_num_per_batch, np.int32)
    if token_num_per_batch.ndim not in (1, 2) or (
        token_num_per_batch.ndim == 2 and token_num_per_batch.shape[1] != 1
    ):
        raise ValueError(
            f"token_num_per_batch must be [bsz], got {list(token_num_per_batch.shape)}"
        )
    bsz = token_num_per_batch.shape[0]
    num = token_num_per_batch.reshape(-1)
    _dtype("sampled_token_ids", sampled_token_ids, np.int64)
    if sampled_token_ids.ndim != 2 or sampled_token_ids.shape[0] < bsz:
        raise ValueError(f"sampled_token_ids must be [>= {bsz}, W], got {sampled_token_ids.shape}")
    rows, cols = _check_logprob_rows(logprob_token_ids, logprob_scores, logprob_ranks)
    cu = _per_request("cu_batch_token_offset", cu_batch_token_offset, np.int32, bsz)
    dec = _per_request("seq_lens_decoder", seq_lens_decoder, np.int32, bsz)
    prompt = _per_request("prompt_lens", prompt_lens, np.int64, bsz)
    go_on = _flag(not_need_stop)
    if bsz > max_bsz:
        raise ValueError(
            f"token_num_per_batch has {bsz} entries but a message holds at most {max_bsz} requests"
        )
    if cols > TOPK_COLUMNS:
        raise ValueError(f"logprob_token_ids has {cols} columns; a message holds {TOPK_COLUMNS}")
    width = min(TOPK_MAX_TOKENS, sampled_token_ids.shape[1])
    counts = [0 if int(dec[i]) < int(prompt[i]) else int(num[i]) for i in range(bsz)]
    for i, n in enumerate(counts):
        if not 0 <= n <= width:
            raise ValueError(f"token_num_per_batch (request {i}) is {n}; must be in [0, {width}]")
        if n and not (0 <= int(cu[i]) and int(cu[i]) + n <= rows):
            raise ValueError(
                f"cu_batch_token_offset (request {i}) puts its rows at {int(cu[i])}..{int(cu[i]) + n}"
                f", outside [0, {rows}]"
            )
    if not save_each_rank and rank_id > 0:
        return None
    words = np.zeros(topk_sent_words(max_bsz), np.int32)
    words[0] = msg_id if go_on else -msg_id
    words[1] = message_flag
    words[2] = bsz
    words[3 : 3 + bsz] = counts
    for i, n in enumerate(counts):
        slot = words[3 + max_bsz + i * TOPK_SLOT_WORDS : 3 + max_bsz + (i + 1) * TOPK_SLOT_WORDS]
        rows_of_i = range(int(cu[i]), int(cu[i]) + n)
        _fill_topk_slot(
            slot, sampled_token_ids[i], rows_of_i, logprob_token_ids, logprob_scores, logprob_ranks
        )
    return words


def _check_logprob_rows(logprob_token_ids, logprob_scores, logprob_ranks):
    """dtypes and shapes of the top-k matrices -> (rows N, columns C)."""
    _dtype("logprob_token_ids", logprob_token_ids, np.int64)
    _dtype("logprob_scores", logprob_scores, np.float32)
    _dtype("logprob_ranks", logprob_ranks, np.int64)
    if logprob_token_ids.ndim != 2 or logprob_token_ids.shape[1] < 1:
        raise ValueError(f"logprob_token_ids must be [N, C >= 1], got {logprob_token_ids.shape}")
    rows, cols = logprob_token_ids.shape
    if logprob_scores.shape != (rows, cols):
        raise ValueError(f"logprob_scores must be [{rows}, {cols}], got {logprob_scores.shape}")
    if logprob_ranks.size < rows:
        raise ValueError(f"logprob_ranks needs >= {rows} entries, got {logprob_ranks.shape}")
    return rows, cols


def _fill_topk_slot(slot, sampled_row, rows, logprob_token_ids, logprob_scores, logprob_ranks):
    """One request's slot of a top-k message (int32 words, written in place): for its j-th token
    (logprob row ``rows[j]``), the sampled token then the top ids (-1 past the C columns), their
    scores' float32 bits (0.0f past them) and the rank."""
    cols = logprob_token_ids.shape[1]
    tokens = slot[:TOPK_SLOT_ENTRIES].reshape(TOPK_MAX_TOKENS, TOPK_COLUMNS)
    scores = slot[TOPK_SLOT_ENTRIES : 2 * TOPK_SLOT_ENTRIES].reshape(TOPK_MAX_TOKENS, TOPK_COLUMNS)
    ranks = slot[2 * TOPK_SLOT_ENTRIES :]
    scores_bits = logprob_scores.view(np.int32)
    for j, r in enumerate(rows):
        tokens[j, 0] = _wrap32(sampled_row[j])
        tokens[j, 1:cols] = _wrap32(logprob_token_ids[r, 1:cols])
        tokens[j, cols:] = -1
        scores[j, :cols] = scores_bits[r, :cols]
        scores[j, cols:] = 0  # the bits of 0.0f
        ranks[j] = _wrap32(logprob_ranks.reshape(-1)[r])


def speculate_get_output_topk_from_message(
    output_tokens, output_scores, output_ranks, real_k, words, max_bsz=None
):
    """What `fd_mtp.ops.speculate_get_output_topk` writes given the received message ``words``
    (int32, ``topk_sent_words(max_bsz)``), or None for an empty queue in non-blocking mode.
    The outputs are numpy arrays written through flat views. Returns True when consumed."""
    max_bsz = _max_bsz(max_bsz)
    toks, scs, rks = (a.reshape(-1) for a in (output_tokens, output_scores, output_ranks))
    if toks.size < 3 + max_bsz * (1 + TOPK_SLOT_ENTRIES):
        raise ValueError(f"output_tokens has {toks.size} elements; too small for max_bsz {max_bsz}")
    if scs.size < max_bsz * TOPK_SLOT_ENTRIES:
        raise ValueError(f"output_scores has {scs.size} elements; too small for max_bsz {max_bsz}")
    if rks.size < max_bsz * TOPK_MAX_TOKENS:
        raise ValueError(f"output_ranks has {rks.size} elements; too small for max_bsz {max_bsz}")
    if words is None:
        toks[:3] = [-2, 0, 0]
        return False
    words = np.asarray(words, np.int32)
    bsz = int(words[2])
    counts = words[3 : 3 + max(bsz, 0)]
    if not 0 <= bsz <= max_bsz or (counts < 0).any() or (counts > TOPK_MAX_TOKENS).any():
        raise ValueError("msg_queue_id delivered a message that is not a top-k message")
    toks[:3] = words[:3]
    toks[3 : 3 + bsz] = counts
    base = 3 + max_bsz
    float_words = words.view(np.float32)
    for i in range(bsz):
        slot = base + i * TOPK_SLOT_WORDS
        for j in range(int(counts[i])):
            e = j * TOPK_COLUMNS + np.arange(real_k + 1)
            toks[base + i * TOPK_SLOT_ENTRIES + e] = words[slot + e]
            scs[i * TOPK_SLOT_ENTRIES + e] = float_words[slot + TOPK_SLOT_ENTRIES + e]
            rks[i * TOPK_MAX_TOKENS + j] = words[slot + 2 * TOPK_SLOT_ENTRIES + j]
    return True


def speculate_get_output_topk(
    output_tokens,
    output_scores,
    output_ranks,
    real_k,
    rank_id,
    wait_flag,
    *,
    msg_queue_id=None,
    ftok_path=None,
    max_bsz=None,
):
    """`fd_mtp.ops.speculate_get_output_topk` with libc's ``msgrcv``: receives the next
    message of the queue (``ftok_path`` None: ``"/dev/shm"``) and writes the numpy outputs as the
    op does (`speculate_get_output_topk_from_message`). Returns True when a message was
    consumed."""
    from ..sysv_queue import receive_message  # libc msgrcv through ctypes

    max_bsz = _max_bsz(max_bsz)
    msg_queue_id = resolve_kw("speculate_get_output_topk", "msg_queue_id", msg_queue_id)
    words = receive_message(
        msg_queue_id,
        ftok_path=TOPK_FTOK_PATH if ftok_path is None else ftok_path,
        wait=bool(wait_flag),
        words=topk_sent_words(max_bsz),
    )
    return speculate_get_output_topk_from_message(
        output_tokens, output_scores, output_ranks, real_k, words, max_bsz
    )
