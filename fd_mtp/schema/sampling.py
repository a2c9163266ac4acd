"""Schemas of the target-side sampling ops: spec ../shared/spec/ops.md §5.5 (penalties) and §5.6
(top-p candidates).

Float tensors of the logits' / probs' dtype are declared ``float32|float16|bfloat16``; the apply
checks that they match it and fills their (untyped) Params pointers and ``float_kind`` by hand.
"""

from . import Attr, Check, Op, Out, Status, Tensor

_FLOAT = "float32|float16|bfloat16"
_NON_FINITE = "is NaN or infinite; it must be finite"

OPS = [
    Op(
        name="speculate_get_token_penalty_multi_scores",
        entry="SpeculateGetTokenPenaltyMultiScores",
        spec="§5.5",
        batch="seq_lens_this_time",
        place="logits",
        kernel="speculate_get_token_penalty_multi_scores",
        params="TokenPenaltyParams",
        extra_params={
            "pre_ids_cols": "Lp",
            "rows": "T",
            "vocab": "V",
            "num_eos": "numel(eos_token_id)",
            "bs": "B",
        },
        args=(
            Tensor("pre_ids", "int64[>=B, Lp]"),
            Tensor("logits", f"{_FLOAT}[T, V]", "written", param=None),
            Tensor("penalty_scores", f"{_FLOAT}[>=B]", param=None, doc="logits' dtype"),
            Tensor("frequency_scores", f"{_FLOAT}[>=B]", param=None, doc="logits' dtype"),
            Tensor("presence_scores", f"{_FLOAT}[>=B]", param=None, doc="logits' dtype"),
            Tensor("temperatures", "float32[>=B]"),
            Tensor("bad_tokens", "int64[]", doc="[Lb] or [rows, Lb] (checked by hand): row 0 only"),
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
