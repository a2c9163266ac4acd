# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""Output-message ops: the speculative decoder's per-step results sent to the token processor"""

import paddle

__all__ = [
    "MAX_BSZ",
    "MAX_DRAFT_TOKENS",
    "MESSAGE_BYTES",
    "MESSAGE_INTS",
    "TOPK_DEFAULT_MAX_BSZ",
    "TOPK_FTOK_PATH",
    "mtp_save_first_token",
    "mtp_save_first_token_dynamic",
    "queue_key",
    "remove_queue",
    "speculate_get_output",
    "speculate_get_output_dynamic",
    "speculate_get_output_topk",
    "speculate_save_output",
    "speculate_save_output_dynamic",
    "speculate_save_output_topk",
    "topk_message_bytes",
]

MAX_BSZ: int

MAX_DRAFT_TOKENS: int

MESSAGE_BYTES: int

MESSAGE_INTS: int

TOPK_DEFAULT_MAX_BSZ: int

TOPK_FTOK_PATH: str

def mtp_save_first_token(
    x: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    prompt_lens: paddle.Tensor,
    step_idx: paddle.Tensor,
    rank_id: int,
    save_each_rank: bool,
    skip_chunk_prefill: bool,
    *,
    msg_queue_id: int | None = None,
    msg_id: int | None = None,
    ftok_path: str | None = None,
) -> None:
    """Send the first target token and the first draft of new requests (spec §6.8; PD prefill node).

    ``bs = x.shape[0]`` (at most 256). Nothing is sent when ``rank_id > 0`` and not
    ``save_each_rank``. Otherwise one message (module docstring) in which request ``i < bs`` with
    ``step_idx[i] == 1`` (and, when ``skip_chunk_prefill``, ``seq_lens_decoder[i] >=
    prompt_lens[i]``) has count 2 and tokens ``[x[i, 0], x[i, 1], 0, 0, 0, 0]``; every other slot
    has count 0 and tokens 0.

    Args:
        x: ``[bs <= 256, >= 2]`` int64, read (``base_model_draft_tokens``: column 0 the target's
            first token, column 1 the MTP's first draft); defines bs.
        not_need_stop: ``[1]`` bool on the CPU, read: the sign of ``mtext[0]``.
        seq_lens_decoder: ``[>=bs]`` int32, read. prompt_lens, step_idx: ``[>=bs]`` int64, read.
        rank_id (int), save_each_rank (bool), skip_chunk_prefill (bool).
        msg_queue_id, msg_id, ftok_path: keyword-only, as in `speculate_save_output`.

    Returns:
        None; no tensor is written. Raises ValueError naming the argument on bad input, with
        nothing sent; OSError when msgsnd fails. Difference from upstream: upstream kept the
        message in a function-static struct and wrote only the slots of requests with step_idx 0
        or 1, so slots with step_idx >= 2 (and i >= bs) repeated the previous message's values;
        here every slot is written (zeros), so a message never carries stale tokens.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> x = paddle.to_tensor([[11, 31, -1], [12, 32, -1], [13, 33, -1]], dtype="int64")
        >>> go_on = paddle.to_tensor([True])
        >>> dec = paddle.to_tensor([4, 4, 4], dtype="int32")
        >>> prompt = paddle.to_tensor([4, 4, 4], dtype="int64")
        >>> step = paddle.to_tensor([1, 0, 2], dtype="int64")
        >>> ops.mtp_save_first_token(x, go_on, dec, prompt, step, 0, False, True, msg_queue_id=97)
        >>> out = paddle.zeros([ops.MESSAGE_INTS], dtype="int64")
        >>> ops.speculate_get_output(out, 0, False, False, msg_queue_id=97)
        >>> out[:5].tolist(), out[258:260].tolist(), int(out[264:].abs().sum())
        ([1, 3, 2, 0, 0], [11, 31], 0)
        >>> ops.remove_queue(97)
        True
    """
    ...

def mtp_save_first_token_dynamic(
    x: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    prompt_lens: paddle.Tensor,
    step_idx: paddle.Tensor,
    rank_id: int,
    msg_queue_id: int,
    save_each_rank: bool,
    skip_chunk_prefill: bool,
    *,
    msg_id: int | None = None,
    ftok_path: str = "./",
) -> None:
    """`mtp_save_first_token` with the queue id positional (upstream's ``_dynamic`` op).

    The given ``msg_queue_id`` is used as is (upstream let ``$INFERENCE_MSG_QUEUE_ID`` override it).
    """
    ...

def queue_key(
    msg_queue_id: int | None = None,
    *,
    ftok_path: str = "./",
) -> int:
    """The SysV key ``ftok(ftok_path, msg_queue_id)`` the ops use (msg_queue_id resolved as theirs)."""
    ...

def remove_queue(
    msg_queue_id: int | None = None,
    *,
    ftok_path: str = "./",
) -> bool:
    """Remove the queue the ops would use (``msgctl(IPC_RMID)``), discarding pending messages.

    Returns True when a queue was removed, False when none existed. A process blocked on the queue
    wakes up with EIDRM (our ops raise OSError).
    """
    ...

def speculate_get_output(
    x: paddle.Tensor,
    rank_id: int,
    wait_flag: bool,
    get_each_rank: bool,
    *,
    msg_queue_id: int | None = None,
    ftok_path: str | None = None,
) -> None:
    """Receive one output message into ``x`` (the token processor's side of §5.11 / §6.8).

    Does nothing when ``rank_id > 0`` and not ``get_each_rank``. Otherwise receives the oldest
    message of the queue (any mtype) and writes its ``MESSAGE_INTS`` int32 words, widened to int64,
    to ``x[0 .. 1793]`` (flat). With ``wait_flag`` False and an empty queue it writes ``x[0] = -2,
    x[1] = 0`` and leaves the rest of ``x``; with ``wait_flag`` True it blocks until a message
    arrives.

    Args:
        x: int64 CPU tensor with at least 1794 elements (FastDeploy: ``[1794, 1]``), **written**.
        rank_id (int), wait_flag (bool), get_each_rank (bool).
        msg_queue_id: keyword-only queue id; default (None) ``$INFERENCE_MSG_QUEUE_ID`` or 1,
            read by fd_mtp.envs.
        ftok_path: keyword-only directory whose inode keys the queue; default (None) ``"./"``
            (upstream's).

    Returns:
        None. Raises ValueError naming ``x`` when it is not an int64 CPU tensor of >= 1794
        elements (checked on every rank). Differences from upstream: a failing ``msgrcv``
        other than "queue empty" in non-blocking mode (EINTR, EIDRM, E2BIG for a foreign
        oversized message) raises OSError instead of reporting -2; a shorter foreign message
        leaves zeros, not a previous message's words, after its end.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> x = paddle.full([ops.MESSAGE_INTS, 1], 5, dtype="int64")
        >>> ops.speculate_get_output(x, 0, False, False, msg_queue_id=98)  # empty queue
        >>> x[:3, 0].tolist()
        [-2, 0, 5]
        >>> ops.remove_queue(98)
        True
    """
    ...

def speculate_get_output_dynamic(
    x: paddle.Tensor,
    rank_id: int,
    wait_flag: bool,
    msg_queue_id: int,
    get_each_rank: bool,
    *,
    ftok_path: str = "./",
) -> None:
    """`speculate_get_output` with the queue id positional (upstream's ``_dynamic`` op).

    The given ``msg_queue_id`` is used as is (upstream let ``$INFERENCE_MSG_QUEUE_ID`` override it).
    """
    ...

def speculate_get_output_topk(
    output_tokens: paddle.Tensor,
    output_scores: paddle.Tensor,
    output_ranks: paddle.Tensor,
    real_k: int,
    rank_id: int,
    wait_flag: bool,
    *,
    msg_queue_id: int | None = None,
    ftok_path: str | None = None,
    max_bsz: int | None = None,
) -> None:
    """Receive one top-k message (the token processor's side of `speculate_save_output_topk`;
    FastDeploy's ``speculate_get_output_topk``).

    With ``wait_flag`` False and an empty queue: ``output_tokens[0:3] = -2, 0, 0`` and nothing
    else. Otherwise (blocking when ``wait_flag``), flat views::

        output_tokens[0:3]   meta[0] (+-msg_id), meta[1] (message_flag), meta[2] (bs)
        output_tokens[3 + i]                          count n_i of request i < bs
        output_tokens[3 + max_bsz + 126 i + 21 j + k] token entry k of token j (k <= real_k)
        output_scores[126 i + 21 j + k]               its score
        output_ranks[6 i + j]                         the sampled token's rank

    for j < n_i; every other element is left as it was (as upstream).

    Args:
        output_tokens: int64 CPU tensor, >= 3 + 127 max_bsz elements (FastDeploy: [65027, 1]),
            **written**.
        output_scores: float32 CPU tensor, >= 126 max_bsz elements, **written**.
        output_ranks: int64 CPU tensor, >= 6 max_bsz elements, **written**.
        real_k (int): 0..20, the logprobs the reader wants (entries 0..real_k are copied).
        rank_id (int): unused (as upstream). wait_flag (bool).
        msg_queue_id, ftok_path, max_bsz: keyword-only, as `speculate_save_output_topk`.

    Returns:
        None. Raises ValueError naming the argument on bad input and when a received message is
        not a top-k message of this ``max_bsz`` (bs or a count out of range: nothing written);
        OSError when msgrcv fails (e.g. E2BIG: a message larger than this max_bsz's).
    """
    ...

def speculate_save_output(
    accept_tokens: paddle.Tensor,
    accept_num: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    prompt_lens: paddle.Tensor,
    rank_id: int,
    save_each_rank: bool,
    skip_prefill: bool,
    *,
    msg_queue_id: int | None = None,
    msg_id: int | None = None,
    ftok_path: str | None = None,
) -> None:
    """Send this step's accepted tokens to the token processor (spec §5.11).

    ``bs = accept_tokens.shape[0]`` (at most 256). Nothing is sent when ``rank_id > 0`` and not
    ``save_each_rank``. Otherwise one message (module docstring) with, for request ``i < bs``:
    count ``accept_num[i]`` (0 when ``skip_prefill`` and ``seq_lens_decoder[i] < prompt_lens[i]``,
    i.e. the request is still in its prompt) and tokens ``accept_tokens[i, :6]`` (always written,
    whatever the count). ``msgsnd`` blocks while the queue is full, as upstream.

    Args:
        accept_tokens: ``[bs <= 256, W]`` int64, read; defines bs. Only the first ``min(W, 6)``
            columns are sent, columns ``W .. 5`` are sent as 0 (upstream read 6 entries from each
            row even when ``W < 6``, running into the next row). Tokens are narrowed to int32.
        accept_num: ``[>=bs]`` int32, read. Every count that is sent must be in
            ``[0, min(W, 6)]`` (ValueError otherwise: a larger count would make the reader take
            the next request's tokens; upstream sent it as is).
        not_need_stop: ``[1]`` bool on the CPU, read: the sign of ``mtext[0]``.
        seq_lens_decoder: ``[>=bs]`` int32, read. prompt_lens: ``[>=bs]`` int64, read.
        rank_id (int), save_each_rank (bool), skip_prefill (bool).
        msg_queue_id: keyword-only queue id; default (None) ``$INFERENCE_MSG_QUEUE_ID`` or 1,
            read by fd_mtp.envs.
        msg_id: keyword-only message id; default (None) ``$INFERENCE_MSG_ID`` or 1; 2 or
            negative raise ValueError.
        ftok_path: keyword-only directory whose inode keys the queue; default (None) ``"./"``
            (upstream's).

    Returns:
        None; no tensor is written. Raises ValueError naming the argument on bad input (bs > 256,
        wrong dtype or shape, a count outside ``[0, min(W, 6)]``, msg_id 2) with nothing sent,
        checked on every rank (upstream returned
        on ranks that do not save before looking at the input); OSError when msgsnd fails.
        GPU tensors (all but not_need_stop) are copied to the host first.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> tokens = paddle.to_tensor([[11, 12], [21, 22]], dtype="int64")
        >>> num = paddle.to_tensor([2, 1], dtype="int32")
        >>> go_on = paddle.to_tensor([True])
        >>> dec = paddle.to_tensor([9, 9], dtype="int32")
        >>> prompt = paddle.to_tensor([4, 4], dtype="int64")
        >>> ops.speculate_save_output(tokens, num, go_on, dec, prompt, 0, False, True,
        ...                           msg_queue_id=99, msg_id=7)
        >>> x = paddle.zeros([ops.MESSAGE_INTS, 1], dtype="int64")
        >>> ops.speculate_get_output(x, 0, False, False, msg_queue_id=99)
        >>> x[:4, 0].tolist(), x[258:270, 0].tolist()
        ([7, 2, 2, 1], [11, 12, 0, 0, 0, 0, 21, 22, 0, 0, 0, 0])
        >>> ops.remove_queue(99)
        True
    """
    ...

def speculate_save_output_dynamic(
    accept_tokens: paddle.Tensor,
    accept_num: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    prompt_lens: paddle.Tensor,
    rank_id: int,
    msg_queue_id: int,
    save_each_rank: bool,
    skip_prefill: bool,
    *,
    msg_id: int | None = None,
    ftok_path: str = "./",
) -> None:
    """`speculate_save_output` with the queue id positional (upstream's ``_dynamic`` op).

    Difference from upstream: the given ``msg_queue_id`` is used as is (upstream's op let
    ``$INFERENCE_MSG_QUEUE_ID`` override it when set). ``msg_queue_id=None`` falls back to the
    environment like `speculate_save_output`.
    """
    ...

def speculate_save_output_topk(
    sampled_token_ids: paddle.Tensor,
    logprob_token_ids: paddle.Tensor,
    logprob_scores: paddle.Tensor,
    logprob_ranks: paddle.Tensor,
    token_num_per_batch: paddle.Tensor,
    cu_batch_token_offset: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    prompt_lens: paddle.Tensor,
    message_flag: int,
    rank_id: int,
    save_each_rank: bool,
    *,
    msg_queue_id: int | None = None,
    msg_id: int | None = None,
    ftok_path: str | None = None,
    max_bsz: int | None = None,
) -> None:
    """Send this step's tokens with their logprobs to the token processor (FastDeploy's
    ``speculate_save_output_topk``; spec §5.16, docs/spec/logprobs.md).

    ``bs = token_num_per_batch.shape[0]`` (at most ``max_bsz``). Nothing is sent when
    ``rank_id > 0`` and not ``save_each_rank``. Otherwise one top-k message::

        long mtype = 1
        int32 meta[3 + max_bsz]: +msg_id (-msg_id when not_need_stop is False), message_flag, bs,
                                 then the token count of each request
        max_bsz slots {int32 tokens[6 * 21]; float32 scores[6 * 21]; int32 ranks[6]}

    Request i sends ``n = token_num_per_batch[i]`` tokens (0 while ``seq_lens_decoder[i] <
    prompt_lens[i]``); its token j uses logprob row ``r = cu_batch_token_offset[i] + j``: entry 0
    is ``sampled_token_ids[i, j]`` with score ``logprob_scores[r, 0]``, entry k (1 <= k < C) is
    ``logprob_token_ids[r, k]`` / ``logprob_scores[r, k]``, entries k >= C are -1 / 0.0, and
    ``ranks[j] = logprob_ranks[r]``. Slots past bs and tokens past a count are zero.

    Args:
        sampled_token_ids: ``[>=bs, Ws]`` int64 (accept_tokens), read.
        logprob_token_ids: ``[N, C]`` int64, read: per emitted token, column 0 the sampled token
            (replaced by sampled_token_ids on the wire), columns 1.. the top logprob ids; C <= 21.
        logprob_scores: ``[N, C]`` float32, read. logprob_ranks: ``[>=N]`` int64, read.
        token_num_per_batch: ``[bs]`` int32, read (accept_num); defines bs.
        cu_batch_token_offset: ``[>=bs]`` int32, read: request i's first logprob row.
        not_need_stop: ``[1]`` bool on the CPU, read: the sign of ``meta[0]``.
        seq_lens_decoder: ``[>=bs]`` int32, read. prompt_lens: ``[>=bs]`` int64, read.
        message_flag (int): ``meta[1]``, 3 for the target's tokens, 4 for the draft's.
        rank_id (int), save_each_rank (bool).
        msg_queue_id: keyword-only queue id; default (None) ``$INFERENCE_MSG_QUEUE_ID`` or 1.
        msg_id: keyword-only message id; default (None) ``$INFERENCE_MSG_ID`` or 1; 2 or
            negative raise ValueError.
        ftok_path: keyword-only; default (None) ``"/dev/shm"`` (upstream's top-k key directory).
        max_bsz: keyword-only requests per message, 1..512; default (None) 512, upstream's
            layout (530448 bytes, more than Linux's default ``kernel.msgmax`` of 8192: FastDeploy
            hosts raise it). Writer and reader must agree.

    Returns:
        None; no tensor is written. Raises ValueError naming the argument, with nothing sent (on
        every rank), on bad shapes / dtypes, bs > max_bsz, a count outside ``[0, min(6, Ws)]``,
        logprob rows outside ``[0, N)``, C > 21 or a reserved msg_id; OSError when msgsnd fails
        (naming kernel.msgmax when the message is larger). Differences from upstream: upstream
        checks none of these (it reads past the arrays), keeps stale slots from earlier messages,
        and assumes C = 21 for the row stride.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
        >>> sampled = paddle.to_tensor([[7, 8]], dtype="int64")
        >>> ids = paddle.to_tensor([[7, 3], [8, 8]], dtype="int64")
        >>> scores = paddle.to_tensor([[-0.5, -0.25], [-0.125, -0.125]])
        >>> ranks = paddle.to_tensor([2, 1], dtype="int64")
        >>> ops.speculate_save_output_topk(sampled, ids, scores, ranks, i32([2]), i32([0]),
        ...     paddle.to_tensor([True]), i32([9]), paddle.to_tensor([4], dtype="int64"), 3, 0,
        ...     False, msg_queue_id=96, msg_id=5, max_bsz=2)
        >>> toks = paddle.zeros([3 + 2 * 127], dtype="int64")
        >>> scs = paddle.zeros([2 * 126], dtype="float32")
        >>> rks = paddle.zeros([2 * 6], dtype="int64")
        >>> ops.speculate_get_output_topk(toks, scs, rks, 1, 0, False, msg_queue_id=96, max_bsz=2)
        >>> toks[:4].tolist(), toks[5:7].tolist(), toks[26:28].tolist()
        ([5, 3, 1, 2], [7, 3], [8, 8])
        >>> scs[:2].tolist(), scs[21:23].tolist(), rks[:2].tolist()
        ([-0.5, -0.25], [-0.125, -0.125], [2, 1])
        >>> ops.remove_queue(96, ftok_path=ops.TOPK_FTOK_PATH)
        True
    """
    ...

def topk_message_bytes(
    max_bsz: int = 512,
) -> int:
    """Bytes ``msgsnd`` / ``msgrcv`` move for a top-k message of ``max_bsz`` requests:
    ``sizeof(struct msgdata) - sizeof(long)``, i.e. ``3 + max_bsz`` meta words, ``max_bsz``
    slots of 258 words and the struct's tail padding (530448 for upstream's 512).
    """
    ...
