// speculate_update (spec §5.10): after verify (and the stop-sequence op),
// advance each target request's lengths by what it accepted, adapt its draft
// budget, make its last accepted token the first draft token, and count the
// stopped requests for not_need_stop.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum SpeculateUpdateStatus : int32_t {
  kSpecUpdateAcceptNum = 1,
  kSpecUpdateThisTime = 2,  // a running decode request's seq_lens_this_time < 0
};

struct SpeculateUpdateParams {
  int32_t* seq_lens_encoder;  // written
  int32_t* seq_lens_decoder;  // written
  int64_t* draft_tokens;      // [max_bsz, draft_tokens_cols], written (column 0)
  int64_t draft_tokens_cols;
  int32_t* actual_draft_token_nums;  // written
  const int64_t* accept_tokens;      // [max_bsz, accept_tokens_cols]
  int64_t accept_tokens_cols;
  const int32_t* accept_num;
  const bool* stop_flags;             // [max_bsz]
  const int32_t* seq_lens_this_time;  // [real_bsz]
  const bool* is_block_step;
  int32_t* mask_rollback;  // written
  int64_t real_bsz;
  int64_t max_bsz;  // >= real_bsz
};

FD_HOST_DEVICE inline void speculate_update_check(const SpeculateUpdateParams& p, int64_t b,
                                                  KernelStatus* st) {
  if (b >= p.real_bsz || p.is_block_step[b]) return;
  const int32_t a = p.accept_num[b];
  if (a < 0 || a > p.accept_tokens_cols) {
    report(st, kSpecUpdateAcceptNum, b, a, p.accept_tokens_cols);
    return;
  }
  // mask_rollback = this_time - accept_num must be a count (and must not overflow int32).
  if (!p.stop_flags[b] && p.seq_lens_encoder[b] == 0 && p.seq_lens_this_time[b] < 0)
    report(st, kSpecUpdateThisTime, b, p.seq_lens_this_time[b], 0);
}

// Applies the op to slot b < max_bsz; returns 1 when the slot counts as
// stopped (a stopped request, or a slot in [real_bsz, max_bsz)); a
// block-stepped request is left alone and counts 0.
FD_HOST_DEVICE inline int speculate_update_apply(const SpeculateUpdateParams& p, int64_t b) {
  if (b >= p.real_bsz) return 1;
  if (p.is_block_step[b]) return 0;
  const int32_t a = p.accept_num[b];
  const int32_t enc = p.seq_lens_encoder[b];
  const int32_t this_time = p.seq_lens_this_time[b];
  int stopped = 0;
  if (p.stop_flags[b]) {
    stopped = 1;
    p.mask_rollback[b] = 0;
  } else if (enc == 0) {
    p.seq_lens_decoder[b] += a;
    p.mask_rollback[b] = this_time - a;
  } else {
    p.mask_rollback[b] = 0;
  }
  // Draft budget: grow after a fully accepted draft, shrink otherwise
  // (evaluated for stopped requests too, upstream behaviour).
  if (this_time > 1 && enc == 0) {
    const int64_t n = p.actual_draft_token_nums[b];
    const int64_t cap = p.draft_tokens_cols - 1;
    int64_t next;
    if (a - 1 == n) {
      next = n + 2 <= cap ? n + 2 : (n + 1 <= cap ? n + 1 : cap);
    } else {
      next = n - 1 > 1 ? n - 1 : 1;
    }
    p.actual_draft_token_nums[b] = static_cast<int32_t>(next);
  }
  if (enc != 0) {
    p.seq_lens_decoder[b] += enc;
    p.seq_lens_encoder[b] = 0;
  }
  // With a == 0 upstream reads the element before the row; we keep the draft.
  if (a > 0)
    p.draft_tokens[b * p.draft_tokens_cols] = p.accept_tokens[b * p.accept_tokens_cols + a - 1];
  return stopped;
}

// CPU driver: checks every request, then applies; returns the status and, in
// *stopped, the number of slots counted as stopped. Nothing is written on bad input.
inline KernelStatus speculate_update_cpu(const SpeculateUpdateParams& p, int64_t* stopped) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.real_bsz && st.code == 0; ++b) speculate_update_check(p, b, &st);
  if (st.code != 0) return st;
  int64_t count = 0;
  for (int64_t b = 0; b < p.max_bsz; ++b) count += speculate_update_apply(p, b);
  *stopped = count;
  return st;
}

}  // namespace fd_mtp
