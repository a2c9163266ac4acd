"""What the three variants of the KV-block step op share (arguments, extra kernel parameters,
status codes), declared in fd_mtp/schema/blocks.py: ``speculate_step_paddle`` (variant "paddle"),
``speculate_step_system_cache`` ("system_cache") and ``speculate_step_reschedule``
("reschedule"). Only the op declarations name the ops: this module is part of their schema, not
another file per op."""

from . import Attr, Status, Tensor

# A tensor the op never reads (FastDeploy passes it): any dtype the schema knows, any shape.
ANY = "any[]"  # an unused argument: any dtype and shape


def step_args(variant="paddle"):
    """The arguments of the step op's ``variant`` ("paddle", "system_cache", "reschedule"; see the
    module docstring), in FastDeploy's order: the system-cache variant inserts
    ori_seq_lens_decoder; the reschedule variant never reads the step / recover lists,
    is_block_step, accept_num or the re-prefill inputs."""
    resched = variant == "reschedule"

    def unused_if_resched(t):
        """Unused by the reschedule variant: any dtype and shape, not passed to the kernel."""
        if not resched:
            return t
        return Tensor(t.name, ANY, "unused", param=None, doc="unused by this variant")

    args = (
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
    )
    args = tuple(unused_if_resched(a) if a.name in RESCHED_UNUSED else a for a in args)
    if variant == "system_cache":
        i = [a.name for a in args].index("ori_seq_lens_encoder") + 1
        ori_dec = Tensor(
            "ori_seq_lens_decoder",
            "int32[>=B]",
            doc="seq_lens_decoder of a recovered request (FastDeploy: step_seq_lens_decoder)",
        )
        args = args[:i] + (ori_dec,) + args[i:]
    return args


RESCHED_UNUSED = {
    "ori_seq_lens_encoder",
    "seq_lens_encoder",
    "is_block_step",
    "step_block_list",
    "step_lens",
    "recover_block_list",
    "recover_lens",
    "input_ids",
    "pre_ids",
    "step_idx",
    "accept_num",
}

STEP_EXTRA = {
    "num_blocks_per_seq": "NB",
    "step_list_capacity": "numel(step_block_list)",
    "recover_list_capacity": "numel(recover_block_list)",
    "need_list_capacity": "numel(need_block_list)",
    "free_list_capacity": "numel(free_list)",
    "input_ids_cols": "L",
    "pre_ids_cols": "Lp",
    "bsz": "B",
}

STEP_STATUS = (
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
    Status("kStepFreeListLen", 4, "free_list_len", "is {value}; it must be in [0, {limit}]"),
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
    Status("kStepRecoverLens", 9, "recover_lens", "is {value} on entry; it must be {limit}"),
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
)
