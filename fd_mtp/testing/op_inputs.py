"""One input factory per op: realistic, valid batches of every op's arguments (numpy), shared by
the benchmarks (benchmarks/bench_ops.py), the bad-input fuzz test (tests/ops/test_fuzz.py) and any
test that needs a whole valid batch rather than a hand case.

``BUILDERS[name](batch)`` returns a `Case`: the positional arguments (numpy arrays and Python
scalars, in FastDeploy's order), their names, which are written, keyword arguments and a config
string. A batch mixes decode / prefill / stopped requests (K = 3 draft tokens, max_model_len 2048
for input_ids / pre_ids, hidden size 1024 in bfloat16 bits for the eagle ops, a block manager with
free blocks to spare). Entries named ``"op[variant]"`` run ``op``. Pure numpy: no paddle import.

The builders live in fd_mtp/testing/builders/, one module per op family (draft, target, blocks,
packing, sampling, ngram, logprobs) over the shared constants and `Case` of ``_common``; this
module offers all their names and registers them in ``BUILDERS``.

The builders also take keyword parameters for the variants the GPU parity tests (tests/gpu) run
(the defaults are the benchmark's batches): ``hidden`` / ``dtype`` of the eagle ops and
rebuild_padding, ``dtype`` of the sampling ops and top_p_candidates' ``candidates``; the builders
of fd_mtp.testing.gpu_step's step take ``variant`` (0: the default batch; n: another mix of
requests drawn with other seeds, the shapes the same but for the packed token counts). A dtype is a
numpy dtype name or "bfloat16" (stored as its uint16 bit patterns, as fd_mtp.reference takes it).
"""

from __future__ import annotations

import functools

from .builders._common import (
    BLOCK_SIZE,
    CANDIDATES,
    EOS_IDS,
    NUM_MODEL_STEP,
    PREFILL_TOKEN_BUDGET,
    SAMPLING_VOCABS,
    THINK_END_ID,
    VOCAB,
    Case,
    H,
    K,
    L,
    as_dtype,
    positional,
)
from .builders.blocks import (
    build_recover_decode,
    build_schedule_cache,
    build_speculate_step,
    build_speculate_step_reschedule,
    build_speculate_step_system_cache,
)
from .builders.draft import (
    build_draft_set_value,
    build_eagle_hidden,
    build_mtp_step,
    build_postprocess,
    build_preprocess,
    build_self_hidden,
    build_update,
    preprocess_state,
)
from .builders.logprobs import build_get_logits, build_get_target_logits, build_insert_first_token
from .builders.ngram import (
    HYBRID_ORDER,
    NGRAM_K,
    NGRAM_MAX,
    NGRAM_MIN,
    NGRAM_ORDER,
    NGRAM_PLANT,
    NGRAM_THRESHOLD,
    NGRAM_VOCAB,
    NGRAM_WRITTEN,
    build_ngram,
    ngram_state,
    ngram_tensors,
)
from .builders.packing import (
    PRE_PROCESS_OUTPUTS,
    build_output_padding_offset,
    build_padding_offset,
    build_pre_process,
    build_rebuild_padding,
    build_seq_lens_output,
    packing_state,
    pre_process_args,
    reference_layout,
)
from .builders.sampling import (
    VERIFY_C,
    VERIFY_V,
    VERIFY_WRITTEN,
    build_penalty,
    build_top_p,
    build_verify,
    build_verify_rejection,
)
from .builders.target import (
    NUM_STOP_SEQS,
    STOP_SEQ_LEN,
    build_calcu_accept_ratio,
    build_clear_accept_nums,
    build_limit_thinking,
    build_set_stop_value,
    build_set_value,
    build_speculate_update,
    build_update_input_ids,
    target_state,
)

__all__ = [
    "BLOCK_SIZE",
    "BUILDERS",
    "CANDIDATES",
    "Case",
    "EOS_IDS",
    "H",
    "HYBRID_ORDER",
    "K",
    "L",
    "NGRAM_K",
    "NGRAM_MAX",
    "NGRAM_MIN",
    "NGRAM_ORDER",
    "NGRAM_PLANT",
    "NGRAM_THRESHOLD",
    "NGRAM_VOCAB",
    "NGRAM_WRITTEN",
    "NUM_MODEL_STEP",
    "NUM_STOP_SEQS",
    "PREFILL_TOKEN_BUDGET",
    "PRE_PROCESS_OUTPUTS",
    "SAMPLING_VOCABS",
    "STEADY_BUFFERS",
    "STOP_SEQ_LEN",
    "THINK_END_ID",
    "VERIFY_C",
    "VERIFY_V",
    "VERIFY_WRITTEN",
    "VOCAB",
    "as_dtype",
    "build_calcu_accept_ratio",
    "build_clear_accept_nums",
    "build_draft_set_value",
    "build_eagle_hidden",
    "build_get_logits",
    "build_get_target_logits",
    "build_insert_first_token",
    "build_limit_thinking",
    "build_mtp_step",
    "build_ngram",
    "build_output_padding_offset",
    "build_padding_offset",
    "build_penalty",
    "build_postprocess",
    "build_pre_process",
    "build_preprocess",
    "build_rebuild_padding",
    "build_recover_decode",
    "build_schedule_cache",
    "build_self_hidden",
    "build_seq_lens_output",
    "build_set_stop_value",
    "build_set_value",
    "build_speculate_step",
    "build_speculate_step_reschedule",
    "build_speculate_step_system_cache",
    "build_speculate_update",
    "build_top_p",
    "build_update",
    "build_update_input_ids",
    "build_verify",
    "build_verify_rejection",
    "ngram_state",
    "ngram_tensors",
    "packing_state",
    "positional",
    "pre_process_args",
    "reference_layout",
    "preprocess_state",
    "target_state",
]

BUILDERS = {
    "speculate_verify": build_verify,
    "speculate_verify[rejection,V=32000]": functools.partial(build_verify_rejection, vocab=32_000),
    "speculate_verify[rejection,V=100000]": functools.partial(
        build_verify_rejection, vocab=100_000
    ),
    "draft_model_preprocess": build_preprocess,
    "eagle_get_hidden_states": build_eagle_hidden,
    "draft_model_update": build_update,
    "eagle_get_self_hidden_states": build_self_hidden,
    "draft_model_postprocess": build_postprocess,
    "mtp_step_paddle": build_mtp_step,
    "speculate_set_stop_value_multi_seqs": build_set_stop_value,
    "speculate_update": build_speculate_update,
    "speculate_set_value_by_flags_and_idx": build_set_value,
    "speculate_clear_accept_nums": build_clear_accept_nums,
    "speculate_calcu_accept_ratio": build_calcu_accept_ratio,
    "draft_model_set_value_by_flags": build_draft_set_value,
    "speculate_limit_thinking_content_length": build_limit_thinking,
    "speculate_update_input_ids_cpu": build_update_input_ids,
    "speculate_schedule_cache": build_schedule_cache,
    "recover_decode_task": build_recover_decode,
    "speculate_step_paddle": build_speculate_step,
    "speculate_get_padding_offset": build_padding_offset,
    "speculate_get_seq_lens_output": build_seq_lens_output,
    "speculate_get_output_padding_offset": build_output_padding_offset,
    "pre_process": build_pre_process,
    "rebuild_padding": build_rebuild_padding,
    **{
        f"speculate_get_token_penalty_multi_scores[V={v}]": functools.partial(
            build_penalty, vocab=v
        )
        for v in SAMPLING_VOCABS
    },
    **{
        f"top_p_candidates[V={v}]": functools.partial(build_top_p, vocab=v) for v in SAMPLING_VOCABS
    },
}
# Row buffers not restored between calls: their writes are the same each call (see module doc).
STEADY_BUFFERS = {"input_ids", "pre_ids", "pre_ids_all"}
BUILDERS["ngram_match"] = functools.partial(build_ngram, op="ngram_match")
BUILDERS["hybrid_mtp_ngram"] = functools.partial(build_ngram, op="hybrid_mtp_ngram")
BUILDERS["speculate_step_system_cache"] = build_speculate_step_system_cache
BUILDERS["speculate_step_reschedule"] = build_speculate_step_reschedule
BUILDERS.update(
    {
        f"speculate_get_logits[V={SAMPLING_VOCABS[0]}]": build_get_logits,
        "speculate_insert_first_token": build_insert_first_token,
        f"speculate_get_target_logits[V={SAMPLING_VOCABS[0]}]": build_get_target_logits,
    }
)
