// draft_model_preprocess (spec §6.1): before the proposer's first substep,
// copy what the target accepted into the draft's inputs and decide which
// requests draft this step.
#pragma once

#include "common.h"

namespace fd_mtp {

enum DraftModelPreprocessStatus : int32_t {
  kPreprocessInputIdsColumn = 1,
  kPreprocessPreIdsColumn = 2,
  kPreprocessAcceptNum = 3,
};

struct DraftModelPreprocessParams {
  int64_t* draft_tokens;  // [bsz, draft_tokens_cols]
  int64_t draft_tokens_cols;
  int64_t* input_ids;  // [bsz, input_ids_cols]
  int64_t input_ids_cols;
  bool* stop_flags;
  int32_t* seq_lens_this_time;
  int32_t* seq_lens_encoder;
  int32_t* seq_lens_decoder;
  int64_t* step_idx;
  bool* is_block_step;
  bool* batch_drop;
  int64_t* pre_ids;  // [bsz, pre_ids_cols]
  int64_t pre_ids_cols;
  int32_t* mask_rollback;
  int32_t* recompute_token_num;
  const int64_t* accept_tokens;  // [bsz, accept_tokens_cols]
  int64_t accept_tokens_cols;
  const int32_t* accept_num;
  // May alias seq_lens_this_time: request b's value is read before it is written.
  const int32_t* base_model_seq_lens_this_time;
  const int32_t* base_model_seq_lens_decoder;
  const int64_t* base_model_step_idx;
  const bool* base_model_stop_flags;
  const bool* base_model_is_block_step;
  int64_t* base_model_draft_tokens;  // [bsz, base_model_draft_tokens_cols]
  int64_t base_model_draft_tokens_cols;
  int64_t bsz;
  int32_t num_model_step;
  bool truncate_first_token;
  bool splitwise_prefill;
  bool kvcache_scheduler_v1;
};

// Validates request b against the writes apply() will make; reads entry values
// only, so all checks can run before anything is written.
FD_HOST_DEVICE inline void draft_model_preprocess_check(const DraftModelPreprocessParams& p,
                                                        int64_t b, KernelStatus* st) {
  const int32_t enc = p.seq_lens_encoder[b];
  const bool prefill_runs = p.splitwise_prefill || !(p.base_model_stop_flags[b] || p.batch_drop[b]);
  if (enc > 0 && prefill_runs) {
    const int64_t col = p.truncate_first_token ? enc - 1 : enc;
    if (!in_range(col, p.input_ids_cols))
      report(st, kPreprocessInputIdsColumn, b, col, p.input_ids_cols);
    return;
  }
  if (p.splitwise_prefill || !prefill_runs) return;
  // Decode: copies accept_num tokens into draft_tokens and pre_ids.
  const int32_t a = p.accept_num[b];
  const int64_t max_a =
      p.draft_tokens_cols < p.accept_tokens_cols ? p.draft_tokens_cols : p.accept_tokens_cols;
  if (a < 0 || a > max_a) {
    report(st, kPreprocessAcceptNum, b, a, max_a);
    return;
  }
  if (a == 0) return;
  const int64_t first = p.base_model_step_idx[b] - a;
  const int64_t last = p.base_model_step_idx[b] - 1;
  if (!in_range(first, p.pre_ids_cols))
    report(st, kPreprocessPreIdsColumn, b, first, p.pre_ids_cols);
  else if (!in_range(last, p.pre_ids_cols))
    report(st, kPreprocessPreIdsColumn, b, last, p.pre_ids_cols);
}

// Writes first accepted token `first` into the draft prompt of a prefilling
// request (E = seq_lens_encoder) and sets its token count.
FD_HOST_DEVICE inline void draft_model_preprocess_prefill_input(const DraftModelPreprocessParams& p,
                                                                int64_t b, int32_t enc,
                                                                int64_t first) {
  int64_t* ids = p.input_ids + b * p.input_ids_cols;
  if (p.truncate_first_token) {
    ids[enc - 1] = first;
    p.seq_lens_this_time[b] = enc;
  } else {
    ids[enc] = first;
    p.seq_lens_this_time[b] = enc + 1;
  }
}

FD_HOST_DEVICE inline void draft_model_preprocess_stop(const DraftModelPreprocessParams& p,
                                                       int64_t b) {
  p.stop_flags[b] = true;
  p.seq_lens_this_time[b] = 0;
  p.seq_lens_decoder[b] = 0;
  p.seq_lens_encoder[b] = 0;
}

// Applies the op to request b; returns 1 when the request drafts this step.
FD_HOST_DEVICE inline int draft_model_preprocess_apply(const DraftModelPreprocessParams& p,
                                                       int64_t b) {
  const int32_t enc = p.seq_lens_encoder[b];
  const int64_t first_accepted = p.accept_tokens[b * p.accept_tokens_cols];

  if (p.splitwise_prefill) {  // Mode A: P node of a prefill/decode split.
    if (enc > 0) {
      p.stop_flags[b] = false;
      draft_model_preprocess_prefill_input(p, b, enc, first_accepted);
      return 1;
    }
    draft_model_preprocess_stop(p, b);
    return 0;
  }

  // Mode B. Read the base values first: base_model_seq_lens_this_time may
  // alias seq_lens_this_time.
  const int32_t base_this_time = p.base_model_seq_lens_this_time[b];
  const int32_t base_dec = p.base_model_seq_lens_decoder[b];
  const int64_t base_step = p.base_model_step_idx[b];
  const bool base_stop = p.base_model_stop_flags[b];
  const bool base_block_step = p.base_model_is_block_step[b];

  int64_t* base_row = p.base_model_draft_tokens + b * p.base_model_draft_tokens_cols;
  for (int64_t i = 1; i < p.base_model_draft_tokens_cols; ++i) base_row[i] = -1;

  if (base_stop && base_block_step) {
    if (p.kvcache_scheduler_v1) {
      p.is_block_step[b] = true;
    } else {
      p.batch_drop[b] = true;
    }
    p.stop_flags[b] = true;
  }
  if (base_stop || p.batch_drop[b]) {
    draft_model_preprocess_stop(p, b);
    return 0;
  }

  if (enc > 0) {  // prefill
    p.stop_flags[b] = false;
    p.pre_ids[b * p.pre_ids_cols] = first_accepted;
    draft_model_preprocess_prefill_input(p, b, enc, first_accepted);
    return 1;
  }

  // decode
  if (p.kvcache_scheduler_v1 && !base_block_step && p.is_block_step[b]) p.is_block_step[b] = false;
  if (p.stop_flags[b]) {  // the draft had stopped (EOS draft, or recovered)
    p.stop_flags[b] = false;
    p.seq_lens_decoder[b] = base_dec - base_this_time;
    p.step_idx[b] = base_step - base_this_time;
  } else {  // rewind the positions the draft filled with its own drafts
    const int32_t r = p.recompute_token_num[b];
    p.seq_lens_decoder[b] -= r;
    p.step_idx[b] -= r;
    p.mask_rollback[b] += r;
    p.recompute_token_num[b] = p.num_model_step - 1;
  }
  const int32_t a = p.accept_num[b];
  const int64_t* accepted = p.accept_tokens + b * p.accept_tokens_cols;
  int64_t* draft_row = p.draft_tokens + b * p.draft_tokens_cols;
  int64_t* pre_row = p.pre_ids + b * p.pre_ids_cols;
  for (int32_t i = 0; i < a; ++i) {
    draft_row[i] = accepted[i];
    pre_row[base_step - a + i] = accepted[i];
  }
  p.seq_lens_this_time[b] = a;
  return 1;
}

// CPU driver: checks every request, then applies; on a bad request nothing is
// written. *running = requests that draft this step (the binding sets
// not_need_stop = *running > 0).
inline KernelStatus draft_model_preprocess_cpu(const DraftModelPreprocessParams& p,
                                               int64_t* running) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) draft_model_preprocess_check(p, b, &st);
  if (st.code != 0) return st;
  *running = 0;
  for (int64_t b = 0; b < p.bsz; ++b) *running += draft_model_preprocess_apply(p, b);
  return st;
}

}  // namespace fd_mtp
