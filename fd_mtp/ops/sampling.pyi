# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""Target-side sampling ops: spec ../shared/spec/ops.md §5.5 (penalties) and §5.6 (top-p candidates)."""

import paddle

__all__ = ["speculate_get_token_penalty_multi_scores", "top_p_candidates"]

def speculate_get_token_penalty_multi_scores(
    pre_ids: paddle.Tensor,
    logits: paddle.Tensor,
    penalty_scores: paddle.Tensor,
    frequency_scores: paddle.Tensor,
    presence_scores: paddle.Tensor,
    temperatures: paddle.Tensor,
    bad_tokens: paddle.Tensor,
    cur_len: paddle.Tensor,
    min_len: paddle.Tensor,
    eos_token_id: paddle.Tensor,
    seq_lens_this_time: paddle.Tensor,
    output_padding_offset: paddle.Tensor,
    output_cum_offsets: paddle.Tensor,
    max_seq_len: int,
) -> paddle.Tensor:
    """Min length, repetition penalties, temperature and bad words on packed logits (spec §5.5).

    ``bs = seq_lens_this_time.shape[0]`` (only its shape is used). Logits row r belongs to request
    ``b = (r + output_padding_offset[r]) // max_seq_len``; rows with ``b >= bs`` are untouched.
    For every other row, in this order:

    1. Min length: if ``cur_len[b] >= 0`` and ``cur_len[b] + (r - (b * max_seq_len -
       output_cum_offsets[b])) < min_len[b]``, every ``eos_token_id`` column is set to -1e10
       (float32 / bfloat16: -1e10 rounded to bfloat16 = -9999220736.0) or -1e4 (float16).
    2. Repeat counts (only if ``cur_len[b] >= 0``) of the ids in ``pre_ids[b]`` with FastDeploy's
       scan rule: lane t of ``bd = min(ceil32(Lp), 512)`` lanes visits positions t, t + bd, ...
       and stops at its first negative id (so with ``pre_ids[b, 0] == -1`` positions 0, bd, 2bd,
       ... are never counted).
    3. Every column: ``x = float32(logit)``; if the id was counted c > 0 times,
       ``x = x * alpha if x < 0 else x / alpha`` then ``x = (x - c * beta) - gamma``
       (alpha, beta, gamma = penalty, frequency, presence of request b); then always
       ``x = x / temperatures[b]``. Float32 arithmetic, each operation rounded (no fused
       multiply-add), one rounding to the logits dtype per element.
    4. Bad words: for each id of the FIRST row of ``bad_tokens`` (every request uses row 0, as
       upstream) with ``0 <= id < V``: the column is set to -1e10 in the logits dtype
       (float16: -inf; bfloat16: -9999220736.0). Ids outside ``[0, V)`` are skipped.

    Args (``[bs]`` may also be ``[bs, 1]``; longer per-request tensors are read below bs):
        pre_ids: ``[>=bs, Lp]`` int64, read (target convention: token k at index k).
        logits: ``[T, V]`` float32, float16 or bfloat16, **written in place**.
        penalty_scores, frequency_scores, presence_scores: ``[>=bs]``, logits' dtype, read.
        temperatures: ``[>=bs]`` float32, read (must be non-zero; 0 gives inf/nan as upstream).
        bad_tokens: ``[Lb]`` or ``[*, Lb]`` int64, read (its first Lb entries only).
        cur_len: ``[>=bs]`` int64, read (``step_idx``). min_len: ``[>=bs]`` int64, read.
        eos_token_id: ``[E]`` or ``[E, 1]`` int64, read.
        seq_lens_this_time: ``[bs]`` int32, shape only.
        output_padding_offset: ``[>=T]`` int32, read. output_cum_offsets: ``[>=bs]`` int32, read.
        max_seq_len (int): the ``L_in`` the offsets were built with.

    Returns:
        ``logits`` (the same tensor, modified in place), as FastDeploy's op returns its in-place
        output.

    Differences from upstream: where upstream writes out of bounds, this op raises ValueError
    naming the argument and writes nothing: an ``eos_token_id`` outside ``[0, V)`` (checked on
    every call), a counted ``pre_ids`` id ``>= V``, or an ``output_padding_offset`` giving a
    negative position. No ``T <= 1024`` limit; no ``[T, V]`` scratch allocation (the GPU path
    uses a ``[min(T, 128), V]`` workspace).

    NaN / inf: ``logits`` only moves through elementwise IEEE arithmetic, so a NaN logit stays
    NaN and an infinite one stays infinite (or becomes NaN where IEEE says so, e.g. ``inf - inf``),
    exactly as in the numpy reference. A NaN or infinite ``penalty_scores``,
    ``frequency_scores``, ``presence_scores`` or ``temperatures`` entry of a request that owns a
    logits row would turn its whole rows meaningless: refused with ValueError naming the argument
    and the request, nothing written (the reference raises the same). Entries of requests without
    rows are not inspected.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> f32 = lambda v: paddle.to_tensor(v, dtype="float32")
        >>> i64 = lambda v: paddle.to_tensor(v, dtype="int64")
        >>> i32 = lambda v: paddle.to_tensor(v, dtype="int32")
        >>> logits = f32([[1.0, -1.0, 2.0, 4.0]])
        >>> out = ops.speculate_get_token_penalty_multi_scores(
        ...     i64([[-1, 0, 1, 1]]), logits, f32([2.0]), f32([0.5]), f32([0.25]), f32([2.0]),
        ...     i64([[3]]), i64([3]), i64([0]), i64([2]), i32([1]), i32([0]), i32([0]), 8)
        >>> out.tolist()
        [[-0.125, -1.625, 1.0, -10000000000.0]]
    """
    ...

def top_p_candidates(
    probs: paddle.Tensor,
    top_p: paddle.Tensor,
    output_padding_offset: paddle.Tensor,
    candidates_len: int,
    max_seq_len: int,
) -> list[paddle.Tensor]:
    """The C most probable tokens of every packed row and the top-p prefix they need (spec §5.6).

    Row r belongs to request ``b = (r + output_padding_offset[r]) // max_seq_len`` and uses
    ``p = top_p[b]``. Its C candidates are stored in order of probability, highest first, **ties
    broken by the lower token id** (a total order: ``verify_tokens[:, 0]`` is exactly numpy's
    ``argmax``, the first maximum). A float32 running sum of the stored probabilities stops at the
    first slot i with ``sum >= p``: ``actual = i + 1`` and the later slots stay 0. If the sum
    never reaches p, all C slots are filled and ``actual`` is 0, except ``p == 1.0`` exactly
    gives C.

    Args:
        probs: ``[T, V]`` float32, float16 or bfloat16, read.
        top_p: ``[bs]`` (or ``[bs, 1]``), probs' dtype, read.
        output_padding_offset: ``[>=T]`` int32, read.
        candidates_len (int): C, one of 1..10, 20, 30, ..., 100, and ``<= V``.
        max_seq_len (int): the ``L_in`` the offsets were built with.

    Returns:
        ``[verify_scores [T, C] probs' dtype, verify_tokens [T, C] int64,
        actual_candidate_lens [T] int32]`` (new tensors).

    NaN / inf: every value of ``probs`` must be finite, and so must the ``top_p`` entry of each
    row's request; otherwise ValueError naming ``probs`` (row and column) or ``top_p`` (request):
    a NaN makes the ranking and the top-p mass meaningless (the reference raises the same).
    Nothing is returned then.

    Differences from upstream: deterministic order (upstream's exact-tie order depends on its
    thread layout); with ``p == 1.0`` the length is always the first i + 1 reaching it (upstream
    may race to C); a row whose request is outside ``top_p`` (or a negative position) raises
    ValueError naming ``output_padding_offset`` instead of reading out of bounds; C > V raises.

    Example:
        >>> import paddle, fd_mtp.ops as ops
        >>> probs = paddle.to_tensor([[0.1, 0.4, 0.1, 0.4], [0.5, 0.25, 0.125, 0.125]])
        >>> top_p = paddle.to_tensor([0.7, 0.8])
        >>> offset = paddle.to_tensor([0, 7], dtype="int32")
        >>> scores, tokens, lens = ops.top_p_candidates(probs, top_p, offset, 3, 8)
        >>> tokens.tolist(), lens.tolist()
        ([[1, 3, 0], [0, 1, 2]], [2, 3])
        >>> scores.tolist()
        [[0.4000000059604645, 0.4000000059604645, 0.0], [0.5, 0.25, 0.125]]
    """
    ...
