"""fd_mtp's speculative-decoding ops, with FastDeploy release/2.4 signatures.

Every op takes its arguments positionally in FastDeploy's order and writes the
arguments its docstring marks "written" in place. Bad input raises ValueError
naming the argument. The compiled library is loaded on the first call.
"""

from ._loader import load
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
from .ipc import (
    set_data_ipc,
    share_external_data,
    shared_empty,
    shared_zeros,
    unset_data_ipc,
)
from .msgqueue import (
    MAX_BSZ,
    MAX_DRAFT_TOKENS,
    MESSAGE_BYTES,
    MESSAGE_INTS,
    mtp_save_first_token,
    mtp_save_first_token_dynamic,
    queue_key,
    remove_queue,
    speculate_get_output,
    speculate_get_output_dynamic,
    speculate_save_output,
    speculate_save_output_dynamic,
)
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
    "load",
    "draft_model_postprocess",
    "draft_model_preprocess",
    "draft_model_update",
    "eagle_get_hidden_states",
    "eagle_get_self_hidden_states",
    "mtp_step_paddle",
    "MAX_BSZ",
    "MAX_DRAFT_TOKENS",
    "MESSAGE_BYTES",
    "MESSAGE_INTS",
    "mtp_save_first_token",
    "mtp_save_first_token_dynamic",
    "queue_key",
    "remove_queue",
    "speculate_get_output",
    "speculate_get_output_dynamic",
    "speculate_save_output",
    "speculate_save_output_dynamic",
    "set_data_ipc",
    "share_external_data",
    "shared_empty",
    "shared_zeros",
    "unset_data_ipc",
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
