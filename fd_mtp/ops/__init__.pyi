# Generated from fd_mtp/schema by fd_mtp/schema/stubs.py: do not edit; run `.venv/bin/python -m fd_mtp.schema.stubs`.
"""fd_mtp's speculative-decoding ops, with FastDeploy release/2.4 signatures."""

from ._loader import check_pending as check_pending
from ._loader import load as load
from ._loader import set_error_mode as set_error_mode
from .attention import decoder_layer as decoder_layer
from .attention import paged_attention as paged_attention
from .blocks import recover_decode_task as recover_decode_task
from .blocks import speculate_schedule_cache as speculate_schedule_cache
from .blocks import speculate_step_paddle as speculate_step_paddle
from .blocks import speculate_step_reschedule as speculate_step_reschedule
from .blocks import speculate_step_system_cache as speculate_step_system_cache
from .draft import draft_model_postprocess as draft_model_postprocess
from .draft import draft_model_preprocess as draft_model_preprocess
from .draft import draft_model_set_value_by_flags as draft_model_set_value_by_flags
from .draft import draft_model_update as draft_model_update
from .draft import eagle_get_hidden_states as eagle_get_hidden_states
from .draft import eagle_get_self_hidden_states as eagle_get_self_hidden_states
from .draft import mtp_step_paddle as mtp_step_paddle
from .ipc import set_data_ipc as set_data_ipc
from .ipc import share_external_data as share_external_data
from .ipc import shared_empty as shared_empty
from .ipc import shared_zeros as shared_zeros
from .ipc import unset_data_ipc as unset_data_ipc
from .logprobs import speculate_get_logits as speculate_get_logits
from .logprobs import speculate_get_target_logits as speculate_get_target_logits
from .logprobs import speculate_insert_first_token as speculate_insert_first_token
from .msgqueue import MAX_BSZ as MAX_BSZ
from .msgqueue import MAX_DRAFT_TOKENS as MAX_DRAFT_TOKENS
from .msgqueue import MESSAGE_BYTES as MESSAGE_BYTES
from .msgqueue import MESSAGE_INTS as MESSAGE_INTS
from .msgqueue import TOPK_DEFAULT_MAX_BSZ as TOPK_DEFAULT_MAX_BSZ
from .msgqueue import TOPK_FTOK_PATH as TOPK_FTOK_PATH
from .msgqueue import mtp_save_first_token as mtp_save_first_token
from .msgqueue import mtp_save_first_token_dynamic as mtp_save_first_token_dynamic
from .msgqueue import queue_key as queue_key
from .msgqueue import remove_queue as remove_queue
from .msgqueue import speculate_get_output as speculate_get_output
from .msgqueue import speculate_get_output_dynamic as speculate_get_output_dynamic
from .msgqueue import speculate_get_output_topk as speculate_get_output_topk
from .msgqueue import speculate_save_output as speculate_save_output
from .msgqueue import speculate_save_output_dynamic as speculate_save_output_dynamic
from .msgqueue import speculate_save_output_topk as speculate_save_output_topk
from .msgqueue import topk_message_bytes as topk_message_bytes
from .ngram import hybrid_mtp_ngram as hybrid_mtp_ngram
from .ngram import ngram_match as ngram_match
from .packing import pre_process as pre_process
from .packing import rebuild_padding as rebuild_padding
from .packing import speculate_get_output_padding_offset as speculate_get_output_padding_offset
from .packing import speculate_get_padding_offset as speculate_get_padding_offset
from .packing import speculate_get_seq_lens_output as speculate_get_seq_lens_output
from .sampling import (
    speculate_get_token_penalty_multi_scores as speculate_get_token_penalty_multi_scores,
)
from .sampling import top_p_candidates as top_p_candidates
from .update import speculate_calcu_accept_ratio as speculate_calcu_accept_ratio
from .update import speculate_clear_accept_nums as speculate_clear_accept_nums
from .update import (
    speculate_limit_thinking_content_length as speculate_limit_thinking_content_length,
)
from .update import speculate_set_stop_value_multi_seqs as speculate_set_stop_value_multi_seqs
from .update import speculate_set_value_by_flags_and_idx as speculate_set_value_by_flags_and_idx
from .update import speculate_update as speculate_update
from .update import speculate_update_input_ids_cpu as speculate_update_input_ids_cpu
from .verify import speculate_verify as speculate_verify
