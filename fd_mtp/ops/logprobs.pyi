# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""Logprob helpers of speculative decoding (spec ../shared/spec/ops.md §5.18,"""

import paddle

__all__ = ["speculate_get_logits", "speculate_get_target_logits", "speculate_insert_first_token"]

def speculate_get_logits(
    draft_logits: paddle.Tensor,
    next_token_num: paddle.Tensor,
    batch_token_num: paddle.Tensor,
    cu_next_token_offset: paddle.Tensor,
    cu_batch_token_offset: paddle.Tensor,
    logits: paddle.Tensor,
    first_token_logits: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
) -> None:
    """Gather the draft model's logits rows of one step, request by request (spec §5.18).

    ``bsz = seq_lens_this_time.shape[0]``, ``V = logits.shape[1]``. For b < bsz, with
    ``enc = seq_lens_encoder[b]`` and ``t = seq_lens_this_time[b]``:

    1. ``next_token_num[b] = 1 if enc > 0 else t`` (rows of ``logits``) and
       ``batch_token_num[b] = 2 if enc > 0 else t`` (rows of ``draft_logits``);
    2. ``cu_next_token_offset[1 + b]`` / ``cu_batch_token_offset[1 + b]``: their inclusive
       prefix sums. Index 0 of both is left untouched and is request 0's start (FastDeploy
       passes zeros); request b > 0 starts at the prefix sum of the requests before it;
    3. a prefill request (enc > 0) writes two rows at its ``draft_logits`` start:
       ``first_token_logits[b]`` then ``logits[cu_next_token_offset[b]]``; a decode request
       copies its t rows ``logits[cu_next_token_offset[b] + j]``, j < t.

    Args (**W** = written in place):
        draft_logits: ``[R, V]`` float32, **W**.
        next_token_num: ``[>=bsz]`` int32, **W**.
        batch_token_num: ``[>=bsz]`` int32, **W**.
        cu_next_token_offset: int32, at least ``bsz + 1`` entries, **W** (entries 1..bsz).
        cu_batch_token_offset: int32, at least ``bsz + 1`` entries, **W** (entries 1..bsz).
        logits: ``[T, V]`` float32, read.
        first_token_logits: ``[>=bsz, V]`` float32, read (row b for a prefill request b).
        seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, read; defines bsz.
        seq_lens_encoder: ``[>=bsz]`` int32, read.

    Returns:
        None. Raises ValueError naming the argument, writing nothing, on bad shapes / dtypes,
        a negative ``seq_lens_this_time`` of a decode request, offsets shorter than bsz + 1,
        or rows outside ``logits`` / ``draft_logits`` (upstream reads and writes past them).

    Differences from upstream: no batch cap (upstream counts with one 512-thread block);
    everything is checked before anything is written. A nonzero entry 0 makes request 0's
    rows overlap the next requests' (as upstream): the CPU op writes in batch order, the
    CUDA kernel in any order.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
        >>> logits = paddle.to_tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]])
        >>> first = paddle.to_tensor([[7.0, 8.0], [9.0, 9.5]])
        >>> draft = paddle.zeros([4, 2])
        >>> n_next, n_batch = i32([0, 0]), i32([0, 0])
        >>> cu_next, cu_batch = i32([0, 0, 0]), i32([0, 0, 0])
        >>> ops.speculate_get_logits(draft, n_next, n_batch, cu_next, cu_batch, logits,
        ...                          first, i32([5, 2]), i32([5, 0]))  # prefill, decode
        >>> n_next.tolist(), n_batch.tolist(), cu_next.tolist(), cu_batch.tolist()
        ([1, 2], [2, 2], [0, 1, 3], [0, 2, 4])
        >>> draft.tolist()
        [[7.0, 8.0], [1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    """
    ...

def speculate_get_target_logits(
    target_logits: paddle.Tensor,
    logits: paddle.Tensor,
    cu_batch_token_offset: paddle.Tensor,
    ori_cu_batch_token_offset: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
    accept_num: paddle.Tensor,
) -> None:
    """Gather the target's logits rows of the accepted tokens (spec §5.18).

    ``bsz = seq_lens_this_time.shape[0]``, ``V = logits.shape[1]``. For b < bsz: a prefill
    request (``seq_lens_encoder[b] > 0``) copies one row, ``logits[ori[b]]`` to
    ``target_logits[cu[b]]``; a decode request copies its first ``accept_num[b]`` rows
    (none when it is <= 0), ``logits[ori[b] + j]`` to ``target_logits[cu[b] + j]``, with
    ``cu = cu_batch_token_offset`` (exclusive prefix sums of accept_num) and ``ori =
    ori_cu_batch_token_offset`` (of the verified rows per request: 1 for a prefill,
    ``seq_lens_this_time`` for a decode).

    Args (**W** = written in place):
        target_logits: ``[R, V]`` float32, **W**.
        logits: ``[T, V]`` float32, read.
        cu_batch_token_offset: ``[>=bsz]`` int32, read.
        ori_cu_batch_token_offset: ``[>=bsz]`` int32, read.
        seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, read; defines bsz.
        seq_lens_encoder: ``[>=bsz]`` int32, read.
        accept_num: ``[>=bsz]`` int32, read.

    Returns:
        None. Raises ValueError naming the argument, writing nothing, when a request's rows
        fall outside ``logits`` or ``target_logits`` (upstream reads and writes past them).

    Differences from upstream: none on valid input (grid-stride over requests, no cap).

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
        >>> logits = paddle.to_tensor([[1.0, 2.0], [3.0, 4.0], [5.0, 6.0], [7.0, 8.0]])
        >>> target = paddle.zeros([3, 2])
        >>> ops.speculate_get_target_logits(target, logits, i32([0, 1]), i32([0, 1]),
        ...                                 i32([5, 3]), i32([5, 0]), i32([1, 2]))
        >>> target.tolist()
        [[1.0, 2.0], [3.0, 4.0], [5.0, 6.0]]
    """
    ...

def speculate_insert_first_token(
    token_ids: paddle.Tensor,
    accept_tokens: paddle.Tensor,
    next_tokens: paddle.Tensor,
    cu_next_token_offset: paddle.Tensor,
    cu_batch_token_offset: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    seq_lens_encoder: paddle.Tensor,
) -> None:
    """Write the token ids matching speculate_get_logits' rows (spec §5.18).

    ``bsz = seq_lens_this_time.shape[0]``. For b < bsz, starting at
    ``token_ids[cu_batch_token_offset[b]]``: a prefill request (``seq_lens_encoder[b] != 0``)
    writes ``accept_tokens[b, 0]`` (the target's first token) then
    ``next_tokens[cu_next_token_offset[b]]``; a decode request copies its
    ``seq_lens_this_time[b]`` tokens ``next_tokens[cu_next_token_offset[b] + i]`` (none when
    it is <= 0).

    Args (**W** = written in place; token_ids and next_tokens are used flat, any shape):
        token_ids: int64, **W**.
        accept_tokens: ``[>=bsz, W]`` int64, read (column 0).
        next_tokens: int64, read.
        cu_next_token_offset: ``[>=bsz]`` int32, read.
        cu_batch_token_offset: ``[>=bsz]`` int32, read.
        seq_lens_this_time: ``[bsz]`` or ``[bsz, 1]`` int32, read; defines bsz.
        seq_lens_encoder: ``[>=bsz]`` int32, read.

    Returns:
        None. Raises ValueError naming the argument, writing nothing, when a request's
        positions fall outside ``token_ids`` or ``next_tokens`` (upstream reads and writes
        past them).

    Differences from upstream: no batch cap (upstream runs one block of bsz threads, at most
    1024). Requests whose ranges overlap are written in batch order here (upstream: in any
    order).

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
        >>> ids = paddle.zeros([4], dtype="int64")
        >>> acc = paddle.to_tensor([[11, 0], [0, 0]], dtype="int64")
        >>> nxt = paddle.to_tensor([21, 22, 23], dtype="int64")
        >>> ops.speculate_insert_first_token(ids, acc, nxt, i32([0, 1]), i32([0, 2]),
        ...                                  i32([5, 2]), i32([5, 0]))
        >>> ids.tolist()
        [11, 21, 22, 23]
    """
    ...
