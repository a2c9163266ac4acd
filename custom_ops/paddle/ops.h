// The Paddle-level entry points of every op (one per PD_BUILD_OP), declared
// once: each custom_ops/paddle/<op>.cc includes this header, so a signature
// that drifts from its declaration does not compile, and pybind_module.cc
// binds the same functions for the fast dynamic-mode path.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "paddle/extension.h"


// draft_model_preprocess.cc
void DraftModelPreprocess(paddle::Tensor& draft_tokens,
    paddle::Tensor& input_ids,
    paddle::Tensor& stop_flags,
    paddle::Tensor& seq_lens_this_time,
    paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder,
    paddle::Tensor& step_idx,
    paddle::Tensor& not_need_stop,
    paddle::Tensor& is_block_step,
    paddle::Tensor& batch_drop,
    paddle::Tensor& pre_ids,
    paddle::Tensor& mask_rollback,
    paddle::Tensor& recompute_token_num,
    const paddle::Tensor& accept_tokens,
    const paddle::Tensor& accept_num,
    const paddle::Tensor& base_model_seq_lens_this_time,
    const paddle::Tensor& base_model_seq_lens_encoder,
    const paddle::Tensor& base_model_seq_lens_decoder,
    const paddle::Tensor& base_model_step_idx,
    const paddle::Tensor& base_model_stop_flags,
    const paddle::Tensor& base_model_is_block_step,
    paddle::Tensor& base_model_draft_tokens,
    int num_model_step,
    bool truncate_first_token,
    bool splitwise_prefill,
    bool kvcache_scheduler_v1);

// eagle_hidden_states.cc
std::vector<paddle::Tensor> EagleGetHiddenStates(const paddle::Tensor& input,
    const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& stop_flags,
    const paddle::Tensor& accept_nums,
    const paddle::Tensor& base_model_seq_lens_this_time,
    const paddle::Tensor& base_model_seq_lens_encoder,
    int actual_draft_token_num);
std::vector<paddle::Tensor> EagleGetSelfHiddenStates(const paddle::Tensor& input,
    const paddle::Tensor& last_seq_lens_this_time,
    const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& step_idx);

// ipc.cc
std::vector<paddle::Tensor> SharedEmpty(const paddle::Tensor& like,
    const std::vector<int64_t>& shape,
    const std::string& name);
void SetDataIpc(paddle::Tensor& tensor,
    const std::string& shm_name);
std::vector<paddle::Tensor> ShareExternalData(const paddle::Tensor& input,
    const std::string& shm_name,
    const std::vector<int64_t>& shape);
void UnsetDataIpc(paddle::Tensor& tensor,
    const std::string& shm_name,
    bool close_ipc,
    bool unlink_shm);

// msgqueue.cc
void SpeculateSaveOutput(const paddle::Tensor& accept_tokens,
    const paddle::Tensor& accept_num,
    const paddle::Tensor& not_need_stop,
    const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& prompt_lens,
    int64_t rank_id,
    bool save_each_rank,
    bool skip_prefill,
    int msg_queue_id,
    int msg_id,
    const std::string& ftok_path);
void SpeculateGetOutput(paddle::Tensor& x,
    int64_t rank_id,
    bool wait_flag,
    bool get_each_rank,
    int msg_queue_id,
    const std::string& ftok_path);
void MtpSaveFirstToken(const paddle::Tensor& x,
    const paddle::Tensor& not_need_stop,
    const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& prompt_lens,
    const paddle::Tensor& step_idx,
    int64_t rank_id,
    bool save_each_rank,
    bool skip_chunk_prefill,
    int msg_queue_id,
    int msg_id,
    const std::string& ftok_path);

// mtp_step.cc
void MtpStepPaddle(const paddle::Tensor& base_model_stop_flags,
    paddle::Tensor& stop_flags,
    paddle::Tensor& batch_drop,
    paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder,
    paddle::Tensor& block_tables,
    paddle::Tensor& encoder_block_lens,
    paddle::Tensor& used_list_len,
    paddle::Tensor& free_list,
    paddle::Tensor& free_list_len,
    int block_size,
    int max_draft_tokens);

// ngram.cc
void NgramMatch(const paddle::Tensor& input_ids,
    const paddle::Tensor& input_ids_len,
    const paddle::Tensor& pre_ids,
    const paddle::Tensor& step_idx,
    const paddle::Tensor& draft_token_num,
    paddle::Tensor& draft_tokens,
    paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& max_dec_len,
    int max_ngram_size,
    int max_draft_tokens,
    int threshold);
void HybridMtpNgram(const paddle::Tensor& input_ids,
    const paddle::Tensor& input_ids_len,
    const paddle::Tensor& pre_ids,
    const paddle::Tensor& step_idx,
    const paddle::Tensor& draft_token_num,
    paddle::Tensor& draft_tokens,
    paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& max_dec_len,
    int max_ngram_size,
    int min_ngram_size,
    int max_draft_tokens,
    int threshold);

// paged_attention.cc
std::vector<paddle::Tensor> PagedAttention(const paddle::Tensor& q,
    const paddle::Tensor& k,
    const paddle::Tensor& v,
    paddle::Tensor& key_cache,
    paddle::Tensor& value_cache,
    const paddle::Tensor& block_tables,
    const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& batch_id_per_token,
    const paddle::Tensor& seq_lens_decoder,
    float scale);

// rebuild_padding.cc
std::vector<paddle::Tensor> RebuildPadding(const paddle::Tensor& tmp_out,
    const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& seq_len_this_time,
    const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::optional<paddle::Tensor>& output_padding_offset,
    const paddle::optional<paddle::Tensor>& first_token_out,
    int max_input_length,
    bool enable_logprob,
    bool use_output_padding_offset);

// recover_decode_task.cc
void RecoverDecodeTask(paddle::Tensor& stop_flags,
    paddle::Tensor& seq_lens_this_time,
    paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& step_seq_lens_decoder,
    const paddle::Tensor& block_tables,
    paddle::Tensor& is_block_step,
    paddle::optional<paddle::Tensor>& draft_tokens,
    const paddle::optional<paddle::Tensor>& step_draft_tokens,
    const paddle::optional<paddle::Tensor>& step_seq_lens_this_time,
    int block_size,
    int max_draft_tokens);

// speculate_clear_accept_nums.cc
void SpeculateClearAcceptNums(paddle::Tensor& accept_num,
    const paddle::Tensor& seq_lens_decoder);

// speculate_get_token_penalty_multi_scores.cc
void SpeculateGetTokenPenaltyMultiScores(const paddle::Tensor& pre_ids,
    paddle::Tensor& logits,
    const paddle::Tensor& penalty_scores,
    const paddle::Tensor& frequency_scores,
    const paddle::Tensor& presence_scores,
    const paddle::Tensor& temperatures,
    const paddle::Tensor& bad_tokens,
    const paddle::Tensor& cur_len,
    const paddle::Tensor& min_len,
    const paddle::Tensor& eos_token_id,
    const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& output_padding_offset,
    const paddle::Tensor& output_cum_offsets,
    int64_t max_seq_len);

// speculate_padding.cc
std::vector<paddle::Tensor> SpeculateGetPaddingOffset(const paddle::Tensor& input_ids,
    const paddle::Tensor& draft_tokens,
    const paddle::Tensor& cum_offsets,
    const paddle::Tensor& token_num,
    const paddle::Tensor& seq_len,
    const paddle::Tensor& seq_lens_encoder);
std::vector<paddle::Tensor> SpeculateGetSeqLensOutput(const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::Tensor& seq_lens_decoder);
std::vector<paddle::Tensor> SpeculateGetOutputPaddingOffset(const paddle::Tensor& output_cum_offsets_tmp,
    const paddle::Tensor& out_token_num,
    const paddle::Tensor& seq_lens_output,
    int max_seq_len);

// speculate_schedule_cache.cc
void SpeculateScheduleCache(const paddle::Tensor& draft_tokens,
    const paddle::Tensor& block_tables,
    paddle::Tensor& stop_flags,
    const paddle::Tensor& prompt_lens,
    paddle::Tensor& seq_lens_this_time,
    paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder,
    paddle::Tensor& step_seq_lens_decoder,
    paddle::Tensor& step_draft_tokens,
    paddle::Tensor& step_seq_lens_this_time,
    paddle::Tensor& accept_num,
    paddle::Tensor& accept_tokens,
    paddle::Tensor& is_block_step,
    paddle::Tensor& not_need_stop,
    const paddle::Tensor& stop_nums,
    int block_size,
    int max_draft_tokens,
    bool prefill_one_step_stop);

// speculate_set_stop_value_multi_seqs.cc
void SpeculateSetStopValueMultiSeqs(paddle::Tensor& accept_tokens,
    paddle::Tensor& accept_num,
    const paddle::Tensor& pre_ids,
    const paddle::Tensor& step_idx,
    paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens,
    const paddle::Tensor& stop_seqs,
    const paddle::Tensor& stop_seqs_len,
    const paddle::Tensor& end_ids);

// speculate_set_value_by_flags_and_idx.cc
void SpeculateSetValueByFlagsAndIdx(paddle::Tensor& pre_ids_all,
    const paddle::Tensor& accept_tokens,
    paddle::Tensor& accept_num,
    const paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& step_idx);

// speculate_step.cc
void SpeculateStepPaddle(paddle::Tensor& stop_flags,
    paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& ori_seq_lens_encoder,
    paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder,
    paddle::Tensor& block_tables,
    paddle::Tensor& encoder_block_lens,
    paddle::Tensor& is_block_step,
    paddle::Tensor& step_block_list,
    paddle::Tensor& step_lens,
    paddle::Tensor& recover_block_list,
    paddle::Tensor& recover_lens,
    paddle::Tensor& need_block_list,
    paddle::Tensor& need_block_len,
    paddle::Tensor& used_list_len,
    paddle::Tensor& free_list,
    paddle::Tensor& free_list_len,
    paddle::Tensor& input_ids,
    const paddle::Tensor& pre_ids,
    const paddle::Tensor& step_idx,
    const paddle::Tensor& next_tokens,
    paddle::Tensor& first_token_ids,
    paddle::Tensor& accept_num,
    int block_size,
    int encoder_decoder_block_num,
    int max_draft_tokens);

// speculate_update.cc
void SpeculateUpdate(paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder,
    paddle::Tensor& not_need_stop,
    paddle::Tensor& draft_tokens,
    paddle::Tensor& actual_draft_token_nums,
    const paddle::Tensor& accept_tokens,
    const paddle::Tensor& accept_num,
    const paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& is_block_step,
    const paddle::Tensor& stop_nums,
    paddle::Tensor& mask_rollback);

// speculate_verify.cc
void SpeculateVerify(const paddle::Tensor& sampled_token_ids,
    paddle::Tensor& accept_tokens,
    paddle::Tensor& accept_num,
    paddle::Tensor& step_idx,
    paddle::Tensor& stop_flags,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& draft_tokens,
    const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& verify_tokens,
    const paddle::Tensor& verify_scores,
    const paddle::Tensor& max_dec_len,
    const paddle::Tensor& end_tokens,
    const paddle::Tensor& is_block_step,
    const paddle::Tensor& output_cum_offsets,
    const paddle::Tensor& actual_candidate_len,
    const paddle::Tensor& actual_draft_token_nums,
    const paddle::Tensor& topp,
    const paddle::optional<paddle::Tensor>& target_probs,
    const paddle::optional<paddle::Tensor>& draft_probs,
    int max_seq_len,
    int verify_window,
    bool enable_topp,
    bool benchmark_mode,
    bool accept_all_drafts,
    int strategy,
    bool prefill_one_step_stop,
    int64_t seed,
    int64_t offset);

// top_p_candidates.cc
std::vector<paddle::Tensor> TopPCandidates(const paddle::Tensor& probs,
    const paddle::Tensor& top_p,
    const paddle::Tensor& output_padding_offset,
    int candidates_len,
    int max_seq_len);
