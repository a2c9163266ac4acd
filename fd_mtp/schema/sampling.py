"""Schemas of the target-side sampling ops: spec ../shared/spec/ops.md §5.5 (penalties) and §5.6
(top-p candidates).

Float tensors of the logits' / probs' dtype are declared ``float32|float16|bfloat16``; the apply
checks that they match it and fills their (untyped) Params pointers and ``float_kind`` by hand.
"""

from . import Attr, Op, Status, Tensor

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
        batch="top_p",
        place="probs",
        kernel="top_p_candidates",
        params="TopPCandidatesParams",
        extra_params={"rows": "T", "vocab": "V", "bs": "B"},
        returns=("verify_scores", "verify_tokens", "actual_candidate_lens"),
        args=(
            Tensor("probs", f"{_FLOAT}[T, V>=0]", param=None),
            Tensor("top_p", f"{_FLOAT}[B]", param=None, doc="probs' dtype"),
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
