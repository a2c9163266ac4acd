"""Schemas of the draft-model (MTP proposer) ops: spec ../shared/spec/ops.md §6."""
from . import Attr, Op, Status, Tensor

OPS = [
    Op(
        name="draft_model_postprocess",
        entry="DraftModelPostprocess",
        spec="§6.5",
        binding=True,
        batch="base_model_seq_lens_this_time",
        kernel="draft_model_postprocess",
        params="DraftModelPostprocessParams",
        extra_params={"draft_cols": "Db", "bsz": "B"},
        args=(
            Tensor("base_model_draft_tokens", "int64[>=B, Db]"),
            Tensor("base_model_seq_lens_this_time", "int32[B]", "written"),
            Tensor("base_model_seq_lens_encoder", "int32[>=B]"),
            Tensor("base_model_stop_flags", "bool[>=B]"),
        ),
    ),
    Op(
        name="draft_model_update",
        entry="DraftModelUpdate",
        spec="§6.3",
        binding=True,
        batch="seq_lens_this_time",
        kernel="draft_model_update",
        params="DraftModelUpdateParams",
        extra_params={
            "num_next_tokens": "numel(inter_next_tokens)",
            "draft_tokens_cols": "Dd",
            "pre_ids_cols": "Lp",
            "num_end_ids": "numel(end_ids)",
            "base_model_draft_tokens_cols": "Db",
            "bsz": "B",
        },
        args=(
            Tensor("inter_next_tokens", "int64[]", doc="read flat: one token per output row"),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written"),
            Tensor("pre_ids", "int64[>=B, Lp>=2]", "written"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_idx", "int64[>=B]", "written"),
            Tensor("output_cum_offsets", "int32[>=B]"),
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("not_need_stop", "bool[1]", "written", cpu=True, param=None),
            Tensor("max_dec_len", "int64[>=B]"),
            Tensor("end_ids", "int64[>=1]"),
            Tensor("base_model_draft_tokens", "int64[>=B, Db]", "written", doc="column substep + 1 written"),
            Attr("max_seq_len", "int", min=1),
            Attr("substep", "int", min=0),
            Attr("prefill_one_step_stop", "bool", kw=True, env="PREFILL_NODE_ONE_STEP_STOP"),
        ),
        status=(
            Status(
                "kUpdateNextTokensRow",
                1,
                "inter_next_tokens",
                "row {value} is read but there are {limit} rows (check output_cum_offsets, "
                "seq_lens_this_time and max_seq_len)",
            ),
            Status(
                "kUpdatePreIdsColumn", 2, "pre_ids", "the sampled token goes to column {value} but the row has {limit} columns"
            ),
            Status(
                "kUpdateEmptyRunningRequest",
                3,
                "seq_lens_this_time",
                "is {value} for a request that is not stopped (it must be >= {limit})",
            ),
        ),
    ),
]
