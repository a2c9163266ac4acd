// draft_model_update (spec §6.3): after each proposer substep, take the token
// the draft sampled for every request, record it, and decide who goes on.
#pragma once

#include "common.h"

namespace fd_mtp {

enum DraftModelUpdateStatus : int32_t {
  kUpdateNextTokensRow = 1,
  kUpdatePreIdsColumn = 2,
  kUpdateEmptyRunningRequest = 3,
  kUpdateDecoderOverflow = 4,  // seq_lens_decoder would pass INT32_MAX
};

struct DraftModelUpdateParams {
  const int64_t* inter_next_tokens;  // flat [num_next_tokens]
  int64_t num_next_tokens;
  int64_t* draft_tokens;  // [bsz, draft_tokens_cols]
  int64_t draft_tokens_cols;
  int64_t* pre_ids;  // [bsz, pre_ids_cols]
  int64_t pre_ids_cols;
  int32_t* seq_lens_this_time;
  int32_t* seq_lens_encoder;
  int32_t* seq_lens_decoder;
  int64_t* step_idx;
  const int32_t* output_cum_offsets;
  bool* stop_flags;
  const int64_t* max_dec_len;
  const int64_t* end_ids;
  int64_t num_end_ids;
  int64_t* base_model_draft_tokens;  // [bsz, base_model_draft_tokens_cols]
  int64_t base_model_draft_tokens_cols;
  int64_t bsz;
  int64_t max_seq_len;
  int32_t substep;  // 0 <= substep < base_model_draft_tokens_cols - 1 (checked by the binding)
  bool prefill_one_step_stop;
};

FD_HOST_DEVICE inline bool draft_model_update_is_decode(const DraftModelUpdateParams& p,
                                                        int64_t b) {
  return p.seq_lens_decoder[b] > 0 && p.seq_lens_encoder[b] <= 0;
}

// Row of inter_next_tokens holding request b's sampled token.
FD_HOST_DEVICE inline int64_t draft_model_update_row(const DraftModelUpdateParams& p, int64_t b) {
  const int64_t start = b * p.max_seq_len - p.output_cum_offsets[b];
  return draft_model_update_is_decode(p, b) ? start + p.seq_lens_this_time[b] - 1 : start;
}

FD_HOST_DEVICE inline void draft_model_update_check(const DraftModelUpdateParams& p, int64_t b,
                                                    KernelStatus* st) {
  if (p.stop_flags[b]) return;
  if (p.seq_lens_this_time[b] <= 0) {
    report(st, kUpdateEmptyRunningRequest, b, p.seq_lens_this_time[b], 1);
    return;
  }
  const int64_t row = draft_model_update_row(p, b);
  if (!in_range(row, p.num_next_tokens)) {
    report(st, kUpdateNextTokensRow, b, row, p.num_next_tokens);
    return;
  }
  const int64_t col =
      draft_model_update_is_decode(p, b) ? p.step_idx[b] + p.seq_lens_this_time[b] : 1;
  if (!in_range(col, p.pre_ids_cols)) {
    report(st, kUpdatePreIdsColumn, b, col, p.pre_ids_cols);
    return;
  }
  // The new seq_lens_decoder (int32) must not overflow.
  const int64_t dec =
      static_cast<int64_t>(p.seq_lens_decoder[b]) +
      (draft_model_update_is_decode(p, b) ? p.seq_lens_this_time[b] : p.seq_lens_encoder[b]);
  if (dec > INT32_MAX) report(st, kUpdateDecoderOverflow, b, dec, INT32_MAX);
}

// Applies the op to request b; returns 1 when the request is (now) stopped.
FD_HOST_DEVICE inline int draft_model_update_apply(const DraftModelUpdateParams& p, int64_t b) {
  int64_t* draft_row = p.draft_tokens + b * p.draft_tokens_cols;
  int64_t* base_slot =
      p.base_model_draft_tokens + b * p.base_model_draft_tokens_cols + p.substep + 1;
  int stopped = 1;
  if (!p.stop_flags[b]) {
    const int32_t q = p.seq_lens_this_time[b];
    const int64_t tok = p.inter_next_tokens[draft_model_update_row(p, b)];
    int64_t* pre_row = p.pre_ids + b * p.pre_ids_cols;
    if (draft_model_update_is_decode(p, b)) {
      p.seq_lens_decoder[b] += q;
      p.step_idx[b] += q;
      pre_row[p.step_idx[b]] = tok;
    } else {  // prefill (or the odd dec == 0 && enc == 0 case)
      p.seq_lens_decoder[b] += p.seq_lens_encoder[b];
      p.seq_lens_encoder[b] = 0;
      pre_row[1] = tok;
      p.step_idx[b] += 1;
    }
    draft_row[0] = tok;
    *base_slot = tok;

    bool is_end = false;
    for (int64_t i = 0; i < p.num_end_ids; ++i) is_end |= tok == p.end_ids[i];
    if (is_end || p.prefill_one_step_stop) {
      p.stop_flags[b] = true;  // the EOS itself stays the proposed draft
    } else if (p.step_idx[b] >= p.max_dec_len[b]) {
      p.stop_flags[b] = true;
      // Upstream writes at index q-1 (not 0); for a long prefill chunk that
      // index is outside the row, and we skip the write instead.
      if (q - 1 < p.draft_tokens_cols) draft_row[q - 1] = p.end_ids[0];
      *base_slot = p.end_ids[0];
    } else {
      stopped = 0;
    }
  } else {
    draft_row[0] = -1;
    *base_slot = -1;
  }
  if (p.stop_flags[b]) {
    p.seq_lens_this_time[b] = 0;
    p.seq_lens_encoder[b] = 0;
  } else {
    p.seq_lens_this_time[b] = 1;
  }
  return stopped;
}

// CPU driver: checks every request, then applies; on a bad request nothing is
// written. *stopped = requests stopped after the update (the binding sets
// not_need_stop = *stopped < bsz).
inline KernelStatus draft_model_update_cpu(const DraftModelUpdateParams& p, int64_t* stopped) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) draft_model_update_check(p, b, &st);
  if (st.code != 0) return st;
  *stopped = 0;
  for (int64_t b = 0; b < p.bsz; ++b) *stopped += draft_model_update_apply(p, b);
  return st;
}

}  // namespace fd_mtp
