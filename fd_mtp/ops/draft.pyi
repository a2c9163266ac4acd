# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""Draft-model (MTP proposer) ops: spec ../shared/spec/ops.md §6."""

import paddle

__all__ = [
    "draft_model_postprocess",
    "draft_model_preprocess",
    "draft_model_set_value_by_flags",
    "draft_model_update",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
]

def draft_model_postprocess(
    base_model_draft_tokens: paddle.Tensor,
    base_model_seq_lens_this_time: paddle.Tensor,
    base_model_seq_lens_encoder: paddle.Tensor,
    base_model_stop_flags: paddle.Tensor,
) -> None:
    """Set the target's per-request token count for the next verify step (spec §6.5).

    ``bsz = base_model_seq_lens_this_time.shape[0]``. For each request b:
    stopped -> 0; running with ``seq_lens_encoder[b] == 0`` -> the number of
    entries of ``base_model_draft_tokens[b]`` that are not -1 (the whole row, not
    a prefix); running and prefilling -> unchanged.

    Args:
        base_model_draft_tokens: ``[>=bsz, K+1]`` int64, read. Target's draft row
            ``[last accepted, d1, ..., dK]``, -1 where no draft.
        base_model_seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, **written**.
        base_model_seq_lens_encoder: ``[>=bsz]`` int32, read.
        base_model_stop_flags: ``[>=bsz]`` bool, read.

    Returns:
        None (like FastDeploy's op).

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> draft = paddle.to_tensor([[7, 8, -1], [5, -1, 6], [1, 2, 3]], dtype="int64")
        >>> this_time = paddle.to_tensor([9, 9, 9], dtype="int32")
        >>> enc = paddle.to_tensor([0, 0, 4], dtype="int32")
        >>> stop = paddle.to_tensor([False, False, False])
        >>> ops.draft_model_postprocess(draft, this_time, enc, stop)
        >>> this_time.tolist()
        [2, 2, 9]
    """
    ...

def draft_model_preprocess(
    draft_tokens: paddle.Tensor,
    input_ids: paddle.Tensor,
    stop_flags: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    step_idx: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    is_block_step: paddle.Tensor,
    batch_drop: paddle.Tensor,
    pre_ids: paddle.Tensor,
    mask_rollback: paddle.Tensor,
    recompute_token_num: paddle.Tensor,
    accept_tokens: paddle.Tensor,
    accept_num: paddle.Tensor,
    base_model_seq_lens_this_time: paddle.Tensor,
    base_model_seq_lens_encoder: paddle.Tensor,
    base_model_seq_lens_decoder: paddle.Tensor,
    base_model_step_idx: paddle.Tensor,
    base_model_stop_flags: paddle.Tensor,
    base_model_is_block_step: paddle.Tensor,
    base_model_draft_tokens: paddle.Tensor,
    num_model_step: int,
    truncate_first_token: bool,
    splitwise_prefill: bool,
    kvcache_scheduler_v1: bool,
) -> None:
    """Prepare the draft model's inputs from what the target accepted (spec §6.1).

    ``bsz = seq_lens_this_time.shape[0]``; every other per-request tensor needs at least
    ``bsz`` entries (pass full ``[max_num_seqs]`` buffers, not a ``[:num_running]`` slice).

    Mode A (``splitwise_prefill``, P node): prefilling requests get the target's first token
    written into their draft prompt and run; the others stop. Mode B (normal): the target's
    draft row is reset to ``[kept, -1, ...]``; block-stepped requests stop (v1 sets
    ``is_block_step``, v0 ``batch_drop``); prefills get the first token (also ``pre_ids[b, 0]``);
    decodes rewind ``recompute_token_num`` positions (or, when the draft had stopped, restart
    from the target's state) and take the ``accept_num`` accepted tokens as their input
    (``draft_tokens``) and history (``pre_ids``).

    Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
        draft_tokens: ``[>=bsz, Dd]`` int64, **W**: the draft's input tokens.
        input_ids: ``[>=bsz, Li]`` int64, **W**: the draft prompt.
        stop_flags: bool, **W**.
        seq_lens_this_time: **W**; defines bsz. May be the same tensor as
            ``base_model_seq_lens_this_time`` (request b is read before it is written).
        seq_lens_encoder, seq_lens_decoder: **W**.
        step_idx: int64, **W**.
        not_need_stop: ``[1]`` bool on the CPU, **W**: True when any request drafts.
        is_block_step, batch_drop: bool, **W**. (FastDeploy's mtp.py passes its
            ``batch_drop`` at position 8 and ``is_block_step`` at 9; keep that at the call
            site to reproduce its pipeline.)
        pre_ids: ``[>=bsz, Lp]`` int64, **W**: the draft's history (token k at index k-1).
        mask_rollback, recompute_token_num: **W**.
        accept_tokens: ``[>=bsz, Wa]`` int64, read (target).
        accept_num: read (target); must be in ``[0, min(Dd, Wa)]`` for decoding requests.
        base_model_seq_lens_this_time, base_model_seq_lens_decoder: read.
        base_model_seq_lens_encoder: unused (kept for the signature; any dtype and shape).
        base_model_step_idx: int64, read. base_model_stop_flags, base_model_is_block_step:
            bool, read.
        base_model_draft_tokens: ``[>=bsz, Db]`` int64, **W**: columns 1.. set to -1.
        num_model_step (int), truncate_first_token, splitwise_prefill,
            kvcache_scheduler_v1 (bool): attributes.

    Returns:
        None. Raises ValueError naming the argument on bad shapes/dtypes, on an
        ``accept_num`` outside the rows, or on a write past ``input_ids``/``pre_ids``;
        in that case nothing is written. (Upstream writes out of bounds and caps bsz at 512.)
    """
    ...

def draft_model_set_value_by_flags(
    draft_tokens: paddle.Tensor,
    pre_ids_all: paddle.Tensor,
    stop_flags: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor | None,
    seq_lens_decoder: paddle.Tensor | None,
    step_idx: paddle.Tensor,
) -> None:
    """Write each running request's tokens of this step into its history (spec §6.9).

    ``bsz = seq_lens_this_time.shape[0]``. For request b with ``seq_lens_this_time[b] != 0``
    and not ``stop_flags[b]``, with ``n = seq_lens_this_time[b]`` and ``s = step_idx[b]``:

    * decode step (``s > 1``): ``pre_ids_all[b, s - n + 1 .. s] = draft_tokens[b, 0 .. n - 1]``
      (the last token at column ``s``, the generated-token convention);
    * first step (``s == 1``): ``pre_ids_all[b, 1] = draft_tokens[b, 0]``;
    * then ``seq_lens_this_time[b] = 1`` (whatever ``s``).

    A custom op of FastDeploy that its MTP proposer does not call (spec §6.9); kept for
    FastDeploy-style code that does.

    Args (per-request tensors are ``[bsz]`` or ``[bsz, 1]`` with at least bsz entries;
    **W** = written in place):
        draft_tokens: ``[>=bsz, Dd]`` int64, read.
        pre_ids_all: ``[>=bsz, Lp]`` int64, **W**: the history rows.
        stop_flags: bool, read.
        seq_lens_this_time: ``[bsz]`` int32, **W** (upstream writes it although its inplace
            map does not say so); defines bsz.
        seq_lens_encoder, seq_lens_decoder: unused (any dtype and shape; FastDeploy passes
            them).
        step_idx: int64, read.

    Returns:
        None. Raises ValueError naming the argument on bad shapes / dtypes / places, or when a
        running request would read past its ``draft_tokens`` row (``n > Dd``) or write outside
        its ``pre_ids_all`` row; nothing is written then.

    Differences from upstream: no ``bsz <= 1024`` cap (upstream's single block); rows past
    the batch are checked instead of read or written out of bounds.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
        >>> pre = i64([[-1, 5, 6, 0, 0, 0], [-1, 0, 0, 0, 0, 0]])
        >>> this_time = paddle.to_tensor([2, 1], dtype="int32")
        >>> ops.draft_model_set_value_by_flags(
        ...     i64([[7, 8], [9, 0]]), pre, paddle.to_tensor([False, False]), this_time,
        ...     None, None, i64([4, 1]))
        >>> pre.tolist(), this_time.tolist()
        ([[-1, 5, 6, 7, 8, 0], [-1, 9, 0, 0, 0, 0]], [1, 1])
    """
    ...

def draft_model_update(
    inter_next_tokens: paddle.Tensor,
    draft_tokens: paddle.Tensor,
    pre_ids: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    step_idx: paddle.Tensor,
    output_cum_offsets: paddle.Tensor,
    stop_flags: paddle.Tensor,
    not_need_stop: paddle.Tensor,
    max_dec_len: paddle.Tensor,
    end_ids: paddle.Tensor,
    base_model_draft_tokens: paddle.Tensor,
    max_seq_len: int,
    substep: int,
    *,
    prefill_one_step_stop: bool | None = None,
) -> None:
    """Record the token each request's draft sampled in substep ``substep`` (spec §6.3).

    ``bsz = seq_lens_this_time.shape[0]``. For a running request b, its token is
    ``inter_next_tokens[b * max_seq_len - output_cum_offsets[b] + (q - 1 if decoding else 0)]``
    (``q = seq_lens_this_time[b]``). It becomes ``draft_tokens[b, 0]`` and
    ``base_model_draft_tokens[b, substep + 1]``, is appended to ``pre_ids`` at the new
    ``step_idx``; a decode advances ``seq_lens_decoder``/``step_idx`` by q, a prefill moves
    ``seq_lens_encoder`` into ``seq_lens_decoder`` and advances ``step_idx`` by 1. An end id
    (which stays the proposed draft) or ``prefill_one_step_stop`` stops the request; reaching
    ``max_dec_len`` stops it and writes ``end_ids[0]`` at ``draft_tokens[b, q - 1]`` and in
    the target row. Stopped requests get -1 drafts. Finally running requests get
    ``seq_lens_this_time = 1``, stopped ones 0 (and ``seq_lens_encoder = 0``).

    Args (int32 ``[bsz]`` or ``[bsz, 1]`` unless noted; **W** = written in place):
        inter_next_tokens: int64, any shape (read flat): the sampled tokens, one per
            output row.
        draft_tokens: ``[>=bsz, Dd]`` int64, **W**.
        pre_ids: ``[>=bsz, Lp >= 2]`` int64, **W**.
        seq_lens_this_time: **W**; defines bsz. seq_lens_encoder, seq_lens_decoder: **W**.
        step_idx: int64, **W**.
        output_cum_offsets: read (from ``pre_process`` with ``max_seq_len``).
        stop_flags: bool, **W**.
        not_need_stop: ``[1]`` bool on the CPU, **W**: True unless every request is stopped.
        max_dec_len: int64, read. end_ids: ``[E]`` or ``[E, 1]`` int64, read (E >= 1).
        base_model_draft_tokens: ``[>=bsz, Db > substep + 1]`` int64, **W** (column
            ``substep + 1``).
        max_seq_len (int): the ``L_in`` the offsets were built with. substep (int).
        prefill_one_step_stop: keyword-only; stop every request after this update (a PD
            prefill node). Default: FastDeploy's environment variable
            ``PREFILL_NODE_ONE_STEP_STOP == "1"``, read here, never in the kernel.

    Returns:
        None. Raises ValueError naming the argument on bad input (nothing written). Unlike
        upstream, a long prefill chunk that reaches ``max_dec_len`` does not write
        ``end_ids[0]`` past the end of its ``draft_tokens`` row.
    """
    ...

def eagle_get_hidden_states(
    input: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    stop_flags: paddle.Tensor,
    accept_nums: paddle.Tensor,
    base_model_seq_lens_this_time: paddle.Tensor,
    base_model_seq_lens_encoder: paddle.Tensor,
    actual_draft_token_num: int,
) -> paddle.Tensor:
    """Gather the target hidden states the draft consumes (spec §6.2).

    Walks the requests in order over the target's packed rows: a prefilling draft request
    (``seq_lens_encoder[b] > 0``) takes its ``seq_lens_encoder[b]`` rows one to one; a request
    that does not draft skips its ``base_model_seq_lens_this_time[b]`` rows; a decoding one
    takes the first ``accept_nums[b]`` of its ``base_model_seq_lens_this_time[b]`` rows.

    Args:
        input: ``[Tin, H]`` float32, float16 or bfloat16: the target model's output.
        seq_lens_this_time: int32 ``[bsz]`` (draft, after ``draft_model_preprocess``);
            defines bsz. seq_lens_encoder: int32 (draft).
        seq_lens_decoder, stop_flags, base_model_seq_lens_encoder: unused (kept for the
            signature; any dtype and shape). actual_draft_token_num (int): unused.
        accept_nums: int32 (target). base_model_seq_lens_this_time: int32.

    Returns:
        A new ``[Tout, H]`` tensor of ``input``'s dtype. Raises ValueError naming the
        argument when the requests would read past ``input`` or ``accept_nums`` exceeds its
        request's rows.

    NaN / inf: a pure row copy; the values of ``input`` are never inspected, so NaN and inf pass
    through bit for bit, as in the numpy reference.
    """
    ...

def eagle_get_self_hidden_states(
    input: paddle.Tensor,
    last_seq_lens_this_time: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    step_idx: paddle.Tensor,
) -> paddle.Tensor:
    """Keep each running request's last hidden row for the next substep (spec §6.4).

    Walks the requests over the rows of this substep's output (``input``): a running request
    with ``step_idx == 1`` (it came from prefill) has one row; another running request
    had ``last_seq_lens_this_time[b]`` rows and keeps the last; a stopped request contributes
    nothing and consumes 1 row (``step_idx == 1`` and it ran) or ``last_seq_lens_this_time[b]``.

    Args:
        input: ``[Tin, H]`` float32, float16 or bfloat16.
        last_seq_lens_this_time: int32 ``[>=bsz]``: this_time before the substep.
        seq_lens_this_time: int32 ``[bsz]`` after ``draft_model_update``; defines bsz.
        step_idx: int64 ``[>=bsz]`` after ``draft_model_update``.

    Returns:
        A new ``[Tout, H]`` tensor, one row per running request.

    NaN / inf: a pure row copy; the values of ``input`` are never inspected, so NaN and inf pass
    through bit for bit, as in the numpy reference.
    """
    ...

def mtp_step_paddle(
    base_model_stop_flags: paddle.Tensor,
    stop_flags: paddle.Tensor,
    batch_drop: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    seq_lens_decoder: paddle.Tensor,
    block_tables: paddle.Tensor,
    encoder_block_lens: paddle.Tensor,
    used_list_len: paddle.Tensor,
    free_list: paddle.Tensor,
    free_list_len: paddle.Tensor,
    block_size: int,
    max_draft_tokens: int,
) -> None:
    """The proposer's decode KV-block manager on the v0 scheduler (spec §6.6).

    1. Requests stopped by the target or dropped return their ``used_list_len[b]`` decode
       blocks (``block_tables[b, encoder_block_lens[b]:...]``) to the free list.
    2. Running requests whose slot ``(seq_lens_decoder + max_draft_tokens + 1) // block_size``
       is -1 need a block.
    3. While more need one than are free, the request holding the most decode blocks (lowest
       index on ties) is dropped: its blocks are freed, ``stop_flags``/``batch_drop`` set,
       ``seq_lens_this_time``/``seq_lens_decoder`` zeroed.
    4. Each needy request not dropped pops a block from the end of the free list.

    Args (int32 ``[bsz]`` unless noted; **W** = written in place):
        base_model_stop_flags: bool, read. stop_flags, batch_drop: bool, **W**.
        seq_lens_this_time: **W**; defines bsz. seq_lens_encoder: unused (any tensor).
        seq_lens_decoder: **W**. block_tables: ``[>=bsz, NB]``, **W**.
        encoder_block_lens, used_list_len: **W**.
        free_list: ``[F]`` (1-D, as FastDeploy's; ``[F, 1]`` and other ranks are refused),
            **W**. free_list_len: ``[1]``, **W**.
        block_size, max_draft_tokens (int): attributes.

    Returns:
        None. Deterministic (batch order), unlike upstream's atomics. Where upstream would
        loop forever (blocks needed and none to preempt) or append past ``free_list``, raises
        ValueError naming ``free_list`` and writes nothing.
    """
    ...
