"""Schemas of the n-gram drafting ops: spec ../shared/spec/ops.md §5.17 (ngram_match) and §6.7
(hybrid_mtp_ngram) (see fd_mtp/schema/__init__.py for the format)."""

from . import Attr, Op, Status, Tensor

# Both ops run the same kernel (custom_ops/kernels/ngram.h) and share its status table.
_STATUS = (
    Status(
        "kNgramInputIdsLen",
        1,
        "input_ids_len",
        "is {value}; it must be in [0, {limit}] (the columns of input_ids)",
    ),
    Status(
        "kNgramStepIdx",
        2,
        "step_idx",
        "is {value}; the query ends at pre_ids[step_idx] but the row has {limit} columns",
    ),
    Status(
        "kNgramDraftTokensCols",
        3,
        "draft_tokens",
        "row needs {value} columns for the drafts this request may receive but has {limit}",
    ),
    Status(
        "kNgramThisTime",
        4,
        "seq_lens_this_time",
        "is {value} for a request that drafts; it must be >= 1",
    ),
)
_EXTRA = {"input_ids_cols": "Li", "pre_ids_cols": "Lp", "draft_tokens_cols": "Dd", "bsz": "B"}
_ANY = "int64|int32|bool|float32|float16|bfloat16|uint8[]"

OPS = [
    Op(
        name="ngram_match",
        entry="NgramMatch",
        spec="§5.17",
        batch="seq_lens_this_time",
        kernel="ngram",
        params="NgramParams",
        extra_params=_EXTRA,
        args=(
            Tensor("input_ids", "int64[>=B, Li]", doc="the prompt haystack"),
            Tensor("input_ids_len", "int64[>=B]"),
            Tensor("pre_ids", "int64[>=B, Lp]", doc="generated token k at column k"),
            Tensor("step_idx", "int64[>=B]"),
            Tensor("draft_token_num", "int32[>=B]"),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", doc="columns 1 .. q"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "int32[>=B]"),
            Tensor("seq_lens_decoder", "int32[>=B]"),
            Tensor("max_dec_len", "int64[>=B]"),
            Attr("max_ngram_size", "int", min=1),
            Attr("max_draft_tokens", "int", doc="ignored, as upstream"),
            Attr("threshold", "int", kw=True, env="INFER_WITH_REFERENCE_TOKENUM_THRESHOLD"),
        ),
        status=_STATUS,
    ),
    Op(
        name="hybrid_mtp_ngram",
        entry="HybridMtpNgram",
        spec="§6.7",
        batch="seq_lens_this_time",
        kernel="ngram",
        params="NgramParams",
        extra_params=_EXTRA,
        args=(
            Tensor("input_ids", "int64[>=B, Li]", doc="the proposer's prompt haystack"),
            Tensor("input_ids_len", "int64[>=B]"),
            Tensor("pre_ids", "int64[>=B, Lp]", doc="the proposer's history"),
            Tensor("step_idx", "int64[>=B]"),
            Tensor(
                "draft_token_num",
                _ANY,
                "unused",
                param=None,
                doc="kept for the signature; any tensor",
            ),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", doc="columns q0 .. K"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]"),
            Tensor("max_dec_len", "int64[>=B]"),
            Attr("max_ngram_size", "int", min=1),
            Attr("min_ngram_size", "int", min=1, doc="<= max_ngram_size (checked by hand)"),
            Attr("max_draft_tokens", "int"),
            Attr("threshold", "int", kw=True, env="SPEC_TOKENUM_THRESHOLD"),
        ),
        status=_STATUS,
    ),
]
