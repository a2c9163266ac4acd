"""Schemas of the target-side KV-block managers: spec ../shared/spec/ops.md §5.13-§5.15, §11 (see
fd_mtp/schema/__init__.py for the format)."""

from . import Attr, Op, Status, Tensor

# A tensor the op never reads (FastDeploy passes it): any dtype the schema knows, any shape.
ANY = "any[]"  # an unused argument: any dtype and shape

OPS = [
    Op(
        name="recover_decode_task",
        entry="RecoverDecodeTask",
        spec="§5.15",
        batch="seq_lens_this_time",
        kernel="recover_decode_task",
        cpu="recover_decode_cpu",
        check=True,
        params="RecoverDecodeParams",
        extra_params={
            "num_blocks_per_seq": "NB",
            "draft_cols": "cols(draft_tokens)",
            "step_draft_cols": "cols(step_draft_tokens)",
            "bsz": "B",
        },
        args=(
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_seq_lens_decoder", "int32[>=B]"),
            Tensor("block_tables", "int32[>=B, NB]"),
            Tensor("is_block_step", "bool[>=B]", "written"),
            # The speculative variant: all three given, or all None (checked in apply).
            Tensor("draft_tokens", "int64[>=B, Dd]", "written", optional=True),
            Tensor("step_draft_tokens", "int64[>=B, Ds]", optional=True),
            Tensor("step_seq_lens_this_time", "int32[>=B]", optional=True),
            Attr("block_size", "int", min=1),
            Attr("max_draft_tokens", "int", min=0),
        ),
        status=(
            Status(
                "kRecoverSlot",
                1,
                "step_seq_lens_decoder",
                "is {value} for a block-stepped request; it must be >= {limit}",
            ),
            Status(
                "kRecoverThisTime",
                2,
                "step_seq_lens_this_time",
                "is {value}; the draft row it restores must fit [0, {limit}] columns of draft_tokens "
                "and step_draft_tokens",
            ),
        ),
    ),
    Op(
        name="speculate_schedule_cache",
        entry="SpeculateScheduleCache",
        spec="§5.14",
        batch="seq_lens_this_time",
        kernel="speculate_schedule_cache",
        cpu="schedule_cache_cpu",
        flag=("not_need_stop", "count + (p.max_bsz - p.bsz) < host.stop_nums"),
        params="ScheduleCacheParams",
        extra_params={
            "draft_cols": "Dd",
            "num_blocks_per_seq": "NB",
            "step_draft_cols": "cols(step_draft_tokens)",
            "accept_cols": "Wa",
            "bsz": "B",
            "max_bsz": "rows(stop_flags)",
        },
        args=(
            Tensor("draft_tokens", "int64[>=B, Dd]"),
            Tensor("block_tables", "int32[>=B, NB]", doc="read (upstream lists it as an output)"),
            Tensor("stop_flags", "bool[>=B]", "written", doc="defines max_bsz"),
            Tensor("prompt_lens", "int64[>=B]"),
            Tensor(
                "seq_lens_this_time", "int32[B]", "written", doc="defines bsz (the running slice)"
            ),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("step_seq_lens_decoder", "int32[>=B]", "written"),
            Tensor(
                "step_draft_tokens",
                "int64[>=B, >=Dd]",
                "written",
                doc="the first Dd columns written",
            ),
            Tensor("step_seq_lens_this_time", "int32[>=B]", "written"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Tensor("accept_tokens", "int64[>=B, Wa]", "written"),
            Tensor("is_block_step", "bool[>=B]", "written"),
            Tensor("not_need_stop", "bool[1]", "written", cpu=True, param=None),
            Tensor("stop_nums", "int64[1]", any_place=True, param=None, doc="read on the host"),
            Attr("block_size", "int", min=1),
            Attr("max_draft_tokens", "int", min=0),
            Attr("prefill_one_step_stop", "bool", kw=True, env="PREFILL_NODE_ONE_STEP_STOP_V1"),
        ),
        status=(
            Status(
                "kScheduleCacheSlot",
                1,
                "seq_lens_decoder",
                "is {value} for a decoding request; it must be >= {limit}",
            ),
        ),
    ),
    Op(
        name="speculate_step_paddle",
        entry="SpeculateStepPaddle",
        spec="§5.13",
        batch="seq_lens_this_time",
        kernel="speculate_step",
        cpu="speculate_step_cpu",
        launcher="speculate_step_cuda",
        params="SpeculateStepParams",
        extra_params={
            "num_blocks_per_seq": "NB",
            "step_list_capacity": "numel(step_block_list)",
            "recover_list_capacity": "numel(recover_block_list)",
            "need_list_capacity": "numel(need_block_list)",
            "free_list_capacity": "numel(free_list)",
            "input_ids_cols": "L",
            "pre_ids_cols": "Lp",
            "bsz": "B",
        },
        args=(
            Tensor("stop_flags", "bool[>=B]", "written"),
            Tensor("seq_lens_this_time", "int32[B]", "written"),
            Tensor(
                "ori_seq_lens_encoder",
                "int32[>=B]",
                doc="prompt lengths (FastDeploy: step_seq_lens_encoder)",
            ),
            Tensor("seq_lens_encoder", "int32[>=B]", "written"),
            Tensor("seq_lens_decoder", "int32[>=B]", "written"),
            Tensor("block_tables", "int32[>=B, NB]", "written"),
            Tensor("encoder_block_lens", "int32[>=B]", "written"),
            Tensor("is_block_step", "bool[>=B]", "written"),
            Tensor("step_block_list", "int32[]", "written"),
            Tensor("step_lens", "int32[1]", "written"),
            Tensor("recover_block_list", "int32[]", "written"),
            Tensor("recover_lens", "int32[1]", "written", doc="0 on entry and exit"),
            Tensor("need_block_list", "int32[]", "written"),
            Tensor("need_block_len", "int32[1]", "written", doc="0 on entry and exit"),
            Tensor("used_list_len", "int32[>=B]", "written"),
            Tensor("free_list", "int32[]", "written"),
            Tensor("free_list_len", "int32[1]", "written"),
            Tensor("input_ids", "int64[>=B, L]", "written", doc="re-prefill rows"),
            Tensor("pre_ids", "int64[>=B, Lp]"),
            Tensor("step_idx", "int64[>=B]"),
            Tensor("next_tokens", ANY, "unused", param=None),
            Tensor("first_token_ids", "int64[>=B]", "written"),
            Tensor("accept_num", "int32[>=B]", "written"),
            Attr("block_size", "int", min=1),
            Attr("encoder_decoder_block_num", "int", param=None, doc="unused"),
            Attr("max_draft_tokens", "int", min=0),
        ),
        status=(
            Status(
                "kStepOutOfBlocks",
                1,
                "free_list",
                "is exhausted: {value} requests need a decode block, {limit} are free, and no running "
                "request holds a decode block to preempt",
            ),
            Status(
                "kStepFreeListFull",
                2,
                "free_list",
                "is too small: returned blocks would fill {value} entries but it has {limit}",
            ),
            Status(
                "kStepUsedListLen",
                3,
                "used_list_len",
                "is {value}; with encoder_block_lens it must fit the block table row ({limit} slots)",
            ),
            Status(
                "kStepFreeListLen", 4, "free_list_len", "is {value}; it must be in [0, {limit}]"
            ),
            Status(
                "kStepStepLens",
                5,
                "step_lens",
                "is {value}; it must be in [0, {limit}] (step_block_list size)",
            ),
            Status(
                "kStepStepListFull",
                6,
                "step_block_list",
                "is too small: preemption pushes entry {value} but it has {limit}",
            ),
            Status(
                "kStepStepListEntry",
                7,
                "step_block_list",
                "the request to recover is {value}; it must be in [0, {limit})",
            ),
            Status("kStepNeedLen", 8, "need_block_len", "is {value} on entry; it must be {limit}"),
            Status(
                "kStepRecoverLens", 9, "recover_lens", "is {value} on entry; it must be {limit}"
            ),
            Status(
                "kStepNeedListFull",
                10,
                "need_block_list",
                "is too small: {value} requests need a block but it has {limit} entries",
            ),
            Status(
                "kStepRecoverListFull",
                11,
                "recover_block_list",
                "is too small: a recovery needs {value} entry but it has {limit}",
            ),
            Status(
                "kStepDecoder",
                12,
                "seq_lens_decoder",
                "is {value} for a running request; it must be >= {limit}",
            ),
            Status(
                "kStepRecoverBlocks",
                13,
                "encoder_block_lens",
                "with the blocks granted on recovery the row needs {value} slots but it has {limit} "
                "(or max_decoder_block_num = input_ids columns / block_size is below encoder_block_lens)",
            ),
            Status(
                "kStepOriLen",
                14,
                "ori_seq_lens_encoder",
                "is {value} for the request to recover; it must be >= {limit}",
            ),
            Status(
                "kStepStepIdx",
                15,
                "step_idx",
                "is {value} for the request to recover; its generated tokens pre_ids[1..step_idx] must "
                "fit pre_ids (step_idx in [0, {limit}])",
            ),
            Status(
                "kStepInputIds",
                16,
                "input_ids",
                "the re-prefill (prompt + generated tokens) needs {value} columns but the row has {limit}",
            ),
        ),
    ),
]
