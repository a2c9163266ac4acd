"""Numpy references of the fd_mtp ops, written from the spec (spec/ops.md); numpy only, no paddle."""

from .attention import paged_attention
from .blocks import recover_decode_task, speculate_schedule_cache, speculate_step_paddle
from .draft import (
    draft_model_postprocess,
    draft_model_preprocess,
    draft_model_update,
    eagle_get_hidden_states,
    eagle_get_self_hidden_states,
    mtp_step_paddle,
)
from .msgqueue import mtp_save_first_token, speculate_get_output, speculate_save_output
from .ngram import hybrid_mtp_ngram, ngram_match
from .packing import (
    pre_process,
    rebuild_padding,
    speculate_get_output_padding_offset,
    speculate_get_padding_offset,
    speculate_get_seq_lens_output,
)
from .sampling import speculate_get_token_penalty_multi_scores, top_p_candidates
from .update import (
    speculate_clear_accept_nums,
    speculate_set_stop_value_multi_seqs,
    speculate_set_value_by_flags_and_idx,
    speculate_update,
)
from .verify import speculate_verify

__all__ = [
    "draft_model_preprocess",
    "draft_model_update",
    "draft_model_postprocess",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "mtp_save_first_token",
    "speculate_get_output",
    "speculate_save_output",
    "speculate_set_stop_value_multi_seqs",
    "speculate_update",
    "speculate_set_value_by_flags_and_idx",
    "speculate_clear_accept_nums",
    "recover_decode_task",
    "speculate_schedule_cache",
    "speculate_step_paddle",
    "pre_process",
    "rebuild_padding",
    "speculate_get_output_padding_offset",
    "speculate_get_padding_offset",
    "speculate_get_seq_lens_output",
    "speculate_get_token_penalty_multi_scores",
    "top_p_candidates",
    "speculate_verify",
    "ngram_match",
    "hybrid_mtp_ngram",
    "paged_attention",
]
