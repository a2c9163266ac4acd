"""Schemas of the target-side sampling ops: spec ../shared/spec/ops.md §5.5 (penalties) and §5.6
(top-p candidates).

Float tensors of the logits' / probs' dtype are declared ``float32|float16|bfloat16``; the apply
checks that they match it and fills their (untyped) Params pointers and ``float_kind`` by hand.
"""

from . import Attr, Check, Op, Out, Status, Tensor, Workspace

_FLOAT = "float32|float16|bfloat16"
_NON_FINITE = "is NaN or infinite; it must be finite"

# The penalty kernel's grid and workspace rows: min(max(rows, 1), 128).
_COUNTS_ROWS = "1 if dims.T < 1 else (dims.T if dims.T < 128 else 128)"

OPS = [
    Op(
        name="speculate_get_token_penalty_multi_scores",
        entry="SpeculateGetTokenPenaltyMultiScores",
        spec="§5.5",
        doc="""    Min length, repetition penalties, temperature and bad words on packed logits (spec §5.5).

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
    """,
        batch="seq_lens_this_time",
        place="logits",
        kernel="speculate_get_token_penalty_multi_scores",
        params="TokenPenaltyParams",
        cpu="token_penalty_cpu",
        launcher="token_penalty_cuda",
        skip="dims.T == 0",  # no logits rows: nothing is checked or written
        result="logits",
        extra_params={
            "pre_ids_cols": "Lp",
            "rows": "T",
            "vocab": "V",
            "num_eos": "numel(eos_token_id)",
            "bs": "B",
            "float_kind": "float_kind(logits)",
            "num_bad_tokens": "0 if numel(bad_tokens) == 0 else dim(bad_tokens, -1)",
            "counts_rows": _COUNTS_ROWS,
        },
        # the repeat counts of the CUDA kernel: one zero [vocab] row per block, left zero
        workspaces=(
            Workspace(
                "counts",
                "int32[]",
                "penalty_counts",
                zero=True,
                size=f"({_COUNTS_ROWS}) * dims.V",
                cpu=False,  # the CPU driver counts in a vector of its own
            ),
        ),
        checks=(
            Check(
                "bad_tokens",
                "rank(bad_tokens) == 1 or rank(bad_tokens) == 2",
                "must be [Lb] or [rows, Lb], got shape {shape(bad_tokens)}",
            ),
        ),
        args=(
            Tensor("pre_ids", "int64[>=B, Lp]"),
            Tensor("logits", f"{_FLOAT}[T, V]", "written"),
            Tensor("penalty_scores", f"{_FLOAT}[>=B]", same_dtype="logits"),
            Tensor("frequency_scores", f"{_FLOAT}[>=B]", same_dtype="logits"),
            Tensor("presence_scores", f"{_FLOAT}[>=B]", same_dtype="logits"),
            Tensor("temperatures", "float32[>=B]"),
            Tensor("bad_tokens", "int64[]", doc="[Lb] or [rows, Lb] (a Check): row 0 only"),
            Tensor("cur_len", "int64[>=B]", doc="step_idx"),
            Tensor("min_len", "int64[>=B]"),
            Tensor("eos_token_id", "int64[E]"),
            Tensor("seq_lens_this_time", "int32[B]", any_place=True, param=None, doc="shape only"),
            Tensor("output_padding_offset", "int32[>=T]"),
            Tensor("output_cum_offsets", "int32[>=B]"),
            Attr("max_seq_len", "int64", min=1, doc="the L_in the offsets were built with"),
        ),
        status=(
            Status(
                "kPenaltyEosId",
                1,
                "eos_token_id",
                "holds id {value}; ids must be in [0, vocab) = [0, {limit})",
            ),
            Status(
                "kPenaltyPreIds",
                2,
                "pre_ids",
                "holds id {value} among the counted ids; ids must be < vocab = {limit}",
            ),
            Status(
                "kPenaltyOffset",
                3,
                "output_padding_offset",
                "gives logits row {value} the offset {limit}: a negative position",
            ),
            Status("kPenaltyPenaltyScore", 4, "penalty_scores", _NON_FINITE),
            Status("kPenaltyFrequencyScore", 5, "frequency_scores", _NON_FINITE),
            Status("kPenaltyPresenceScore", 6, "presence_scores", _NON_FINITE),
            Status("kPenaltyTemperature", 7, "temperatures", _NON_FINITE),
        ),
    ),
    Op(
        name="top_p_candidates",
        entry="TopPCandidates",
        spec="§5.6",
        doc="""The C most probable tokens of every packed row and the top-p prefix they need (spec §5.6).

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
        """,
        batch="top_p",
        place="probs",
        kernel="top_p_candidates",
        params="TopPCandidatesParams",
        cpu="top_p_candidates_cpu",
        extra_params={"rows": "T", "vocab": "V", "bs": "B", "float_kind": "float_kind(probs)"},
        outputs=(  # the kernel writes every slot
            Out("verify_scores", "any[T, candidates_len]", like="probs"),
            Out("verify_tokens", "int64[T, candidates_len]"),
            Out("actual_candidate_lens", "int32[T]"),
        ),
        checks=(
            Check(
                "candidates_len",
                "(candidates_len >= 1 and candidates_len <= 10) or (candidates_len >= 20 and "
                "candidates_len <= 100 and candidates_len % 10 == 0)",
                "must be 1..10 or a multiple of 10 up to 100, got {candidates_len}",
            ),
            Check(
                "candidates_len",
                "candidates_len <= dims.V",
                "is {candidates_len} but probs has only {dims.V} columns",
            ),
        ),
        args=(
            Tensor("probs", f"{_FLOAT}[T, V>=0]"),
            Tensor("top_p", f"{_FLOAT}[B]", same_dtype="probs", doc="probs' dtype"),
            Tensor("output_padding_offset", "int32[>=T]"),
            Attr(
                "candidates_len",
                "int",
                param="candidates",
                doc="1..10 or a multiple of 10 up to 100, <= V",
            ),
            Attr("max_seq_len", "int", min=1, doc="the L_in the offsets were built with"),
        ),
        status=(
            Status(
                "kTopPNegativeRow",
                1,
                "output_padding_offset",
                "gives probs row {value} the offset {limit}: a negative position",
            ),
            Status(
                "kTopPRequestRow",
                2,
                "output_padding_offset",
                "maps a probs row to request {value} but top_p has {limit} entries",
            ),
            Status("kTopPTopP", 3, "top_p", _NON_FINITE),
            Status(
                "kTopPProbs",
                4,
                "probs",
                "row {value} holds NaN or inf at column {limit}; probabilities must be finite",
            ),
        ),
    ),
]
