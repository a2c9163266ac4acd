"""Schemas of the target-side update ops of one engine step: spec ../shared/spec/ops.md §5.8, §5.10,
§5.12, §5.16 (see fd_mtp/schema/__init__.py for the format)."""

from . import Attr, Op, Status, Tensor  # noqa: F401

# A tensor the op never reads (FastDeploy passes it): any dtype the schema knows, any shape.
ANY = "any[]"  # an unused argument: any dtype and shape

_ACCEPT_NUM_RANGE = "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"

OPS = [
    Op(
        name="speculate_clear_accept_nums",
        entry="SpeculateClearAcceptNums",
        spec="§5.16",
        batch="seq_lens_decoder",
        kernel="speculate_clear_accept_nums",
        cpu="clear_accept_nums_cpu",
        params="ClearAcceptNumsParams",
        extra_params={"bsz": "B"},
        args=(
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[B]"),
        ),
    ),
    Op(
        name="speculate_set_stop_value_multi_seqs",
        entry="SpeculateSetStopValueMultiSeqs",
        spec="§5.8",
        # bs is accept_tokens' row count (a matrix, so not an Op.batch vector): it binds B itself.
        kernel="speculate_set_stop_value_multi_seqs",
        cpu="set_stop_value_cpu",
        params="SetStopValueParams",
        extra_params={
            "accept_tokens_cols": "Wa",
            "pre_ids_cols": "Lp",
            "num_stop_seqs": "S",
            "stop_seq_cols": "Ls",
            "bs": "B",
        },
        args=(
            Tensor("accept_tokens", "int64[B, Wa>=0]", "written", doc="defines bs"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("pre_ids", "int64[>=B, Lp]"),
            Tensor("step_idx", "int64[>=B]"),
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("seq_lens", ANY, "unused", param=None),
            Tensor("stop_seqs", "int64[>=B, S>=0, Ls>=0]"),
            Tensor("stop_seqs_len", "int32[>=B, S]"),
            Tensor("end_ids", "int64[>=1]", doc="only end_ids[0] is read"),
        ),
        status=(
            Status("kStopAcceptNum", 1, "accept_num", _ACCEPT_NUM_RANGE),
            Status(
                "kStopSeqLen",
                2,
                "stop_seqs_len",
                "is {value}; it must be in [0, {limit}] (stop_seqs.shape[2])",
            ),
            Status(
                "kStopPreIdsColumn",
                3,
                "pre_ids",
                "column {value} (step_idx - accept_num) is compared but the row has {limit} columns",
            ),
        ),
    ),
    Op(
        name="speculate_update",
        entry="SpeculateUpdate",
        spec="§5.10",
        batch="seq_lens_this_time",
        kernel="speculate_update",
        cpu="speculate_update_cpu",
        flag=("not_need_stop", "count < host.stop_nums"),
        params="SpeculateUpdateParams",
        extra_params={
            "draft_tokens_cols": "Dd",
            "accept_tokens_cols": "Wa",
            "real_bsz": "B",
            "max_bsz": "rows(stop_flags)",
        },
        args=(
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("not_need_stop", "bool[1]", "written", cpu=True, param=None),
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", doc="column 0 written"),
            Tensor("actual_draft_token_nums", "int32[>=B]", "written"),
            Tensor("accept_tokens", "int64[>=B, Wa]"),
            Tensor("accept_num", "int32[>=B]"),
            Tensor("stop_flags", "bool[>=B]", doc="defines max_bsz"),
            Tensor("seq_lens_this_time", "int32[B]", doc="defines real_bsz"),
            Tensor("is_block_step", "bool[>=B]"),
            Tensor("stop_nums", "int64[1]", any_place=True, param=None, doc="read on the host"),
            Tensor("mask_rollback", "int32[>=B]", "written"),
        ),
        status=(
            Status("kSpecUpdateAcceptNum", 1, "accept_num", _ACCEPT_NUM_RANGE),
            Status(
                "kSpecUpdateThisTime",
                2,
                "seq_lens_this_time",
                "is {value} for a running decode request; it must be >= {limit}",
            ),
        ),
    ),
    Op(
        name="speculate_set_value_by_flags_and_idx",
        entry="SpeculateSetValueByFlagsAndIdx",
        spec="§5.12",
        batch="seq_lens_this_time",
        kernel="speculate_set_value_by_flags_and_idx",
        cpu="set_value_cpu",
        params="SetValueByFlagsParams",
        extra_params={"pre_ids_cols": "Lp", "accept_tokens_cols": "Wa", "bs": "B"},
        args=(
            Tensor("pre_ids_all", "int64[>=B, Lp]", "written"),
            Tensor("accept_tokens", "int64[>=B, Wa]"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("stop_flags", "bool[>=B]"),
            Tensor("seq_lens_this_time", "int32[B]", param=None, doc="only its length is used"),
            Tensor("seq_lens_encoder", "int32[>=B]"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_idx", "int64[>=B]"),
        ),
        status=(
            Status("kSetValueAcceptNum", 1, "accept_num", _ACCEPT_NUM_RANGE),
            Status(
                "kSetValuePreIdsColumn",
                2,
                "pre_ids_all",
                "accepted tokens go to column {value} (from step_idx and accept_num) but the row has {limit} columns",
            ),
        ),
    ),
]
