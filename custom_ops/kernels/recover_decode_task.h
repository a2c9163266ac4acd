// recover_decode_task (spec §5.15, v1 scheduler, start of every step): a
// block-stepped request whose next KV slot has been granted a block (by the
// Python scheduler) resumes decoding with the lengths (and, speculative
// variant, the draft row) that speculate_schedule_cache parked.
//
// Slot: speculative (step_seq_lens_decoder + 2K + 1) // block_size,
// non-speculative step_seq_lens_decoder // block_size. Upstream clamps the
// slot to NB and then reads block_tables[b, NB], one past the row. Here a slot
// at or past the end of the row means "no block left to wait for" and the
// request resumes, as speculate_schedule_cache never block-steps a request
// whose slot lies past the row (nothing is read outside the row).
//
// Requests are independent: one thread (or loop iteration) per request.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum RecoverDecodeStatus : int32_t {
  kRecoverSlot = 1,      // negative slot (step_seq_lens_decoder < 0)
  kRecoverThisTime = 2,  // step_seq_lens_this_time outside [0, draft columns]
};

struct RecoverDecodeParams {
  bool* stop_flags;
  int32_t* seq_lens_this_time;
  int32_t* seq_lens_encoder;
  int32_t* seq_lens_decoder;
  const int32_t* step_seq_lens_decoder;
  const int32_t* block_tables;  // [>=bsz, num_blocks_per_seq]
  int64_t num_blocks_per_seq;
  bool* is_block_step;
  // Speculative variant (all three set) or nullptr (non-speculative variant).
  int64_t* draft_tokens;             // [>=bsz, draft_cols]
  const int64_t* step_draft_tokens;  // [>=bsz, step_draft_cols]
  const int32_t* step_seq_lens_this_time;
  int64_t draft_cols;
  int64_t step_draft_cols;
  int64_t bsz;
  int32_t block_size;
  int32_t max_draft_tokens;
};

FD_HOST_DEVICE inline bool recover_speculative(const RecoverDecodeParams& p) {
  return p.draft_tokens != nullptr;
}

FD_HOST_DEVICE inline int64_t recover_slot(const RecoverDecodeParams& p, int64_t b) {
  const int64_t dec = p.step_seq_lens_decoder[b];
  return recover_speculative(p) ? (dec + 2 * p.max_draft_tokens + 1) / p.block_size
                                : dec / p.block_size;
}

// True when block-stepped request b has its next block (or needs none).
FD_HOST_DEVICE inline bool recover_ready(const RecoverDecodeParams& p, int64_t b) {
  const int64_t slot = recover_slot(p, b);
  return slot >= p.num_blocks_per_seq || p.block_tables[b * p.num_blocks_per_seq + slot] != -1;
}

FD_HOST_DEVICE inline void recover_check(const RecoverDecodeParams& p, int64_t b,
                                         KernelStatus* st) {
  if (!p.is_block_step[b]) return;
  if (p.step_seq_lens_decoder[b] < 0) {
    report(st, kRecoverSlot, static_cast<int32_t>(b), p.step_seq_lens_decoder[b], 0);
    return;
  }
  if (!recover_speculative(p) || !recover_ready(p, b)) return;
  const int64_t cols = p.draft_cols < p.step_draft_cols ? p.draft_cols : p.step_draft_cols;
  const int64_t n = p.step_seq_lens_this_time[b];
  if (n < 0 || n > cols) report(st, kRecoverThisTime, static_cast<int32_t>(b), n, cols);
}

FD_HOST_DEVICE inline void recover_apply(const RecoverDecodeParams& p, int64_t b) {
  if (!p.is_block_step[b] || !recover_ready(p, b)) return;
  p.is_block_step[b] = false;
  p.stop_flags[b] = false;
  p.seq_lens_encoder[b] = 0;
  p.seq_lens_decoder[b] = p.step_seq_lens_decoder[b];
  if (recover_speculative(p)) {
    const int32_t n = p.step_seq_lens_this_time[b];
    p.seq_lens_this_time[b] = n;
    for (int64_t i = 0; i < n; ++i)
      p.draft_tokens[b * p.draft_cols + i] = p.step_draft_tokens[b * p.step_draft_cols + i];
  } else {
    p.seq_lens_this_time[b] = 1;
  }
}

inline KernelStatus recover_decode_cpu(const RecoverDecodeParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) recover_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bsz; ++b) recover_apply(p, b);
  return st;
}

}  // namespace fd_mtp
