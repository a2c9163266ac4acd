// speculate_schedule_cache (spec §5.14, v1 scheduler, after the proposer):
// stops requests whose prefill is unfinished (the scheduler re-inserts the
// next chunk) or, on a PD prefill node, every request; a decoding request whose
// next KV slot (dec + 2K + 2) // block_size has no block yet is "block-stepped":
// its lengths and draft row are parked in the step_* buffers and it is stopped
// until recover_decode_task restores it. Counts the stopped requests for
// not_need_stop (stopped < stop_nums).
//
// Requests are independent: one thread (or loop iteration) per request.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum ScheduleCacheStatus : int32_t {
  kScheduleCacheSlot = 1,  // the slot index is negative (seq_lens_decoder < 0)
};

struct ScheduleCacheParams {
  const int64_t* draft_tokens;  // [>=bsz, draft_cols]
  int64_t draft_cols;
  const int32_t* block_tables;  // [>=bsz, num_blocks_per_seq]
  int64_t num_blocks_per_seq;
  bool* stop_flags;
  const int64_t* prompt_lens;
  int32_t* seq_lens_this_time;
  int32_t* seq_lens_encoder;
  int32_t* seq_lens_decoder;
  int32_t* step_seq_lens_decoder;
  int64_t* step_draft_tokens;  // [>=bsz, step_draft_cols >= draft_cols]
  int64_t step_draft_cols;
  int32_t* step_seq_lens_this_time;
  int32_t* accept_num;
  int64_t* accept_tokens;  // [>=bsz, accept_cols]
  int64_t accept_cols;
  bool* is_block_step;
  int64_t bsz;      // real_bsz = seq_lens_this_time.shape[0]
  int64_t max_bsz;  // stop_flags.shape[0]; slots in [bsz, max_bsz) count as stopped
  int32_t block_size;
  int32_t max_draft_tokens;
  bool prefill_one_step_stop;
};

// The slot a decoding request needs for its next step.
FD_HOST_DEVICE inline int64_t schedule_cache_slot(const ScheduleCacheParams& p, int64_t b) {
  return (static_cast<int64_t>(p.seq_lens_decoder[b]) + 2 * p.max_draft_tokens + 2) / p.block_size;
}

FD_HOST_DEVICE inline bool schedule_cache_reads_slot(const ScheduleCacheParams& p, int64_t b) {
  return !p.stop_flags[b] && !p.prefill_one_step_stop && p.seq_lens_decoder[b] >= p.prompt_lens[b];
}

FD_HOST_DEVICE inline void schedule_cache_check(const ScheduleCacheParams& p, int64_t b,
                                                KernelStatus* st) {
  if (schedule_cache_reads_slot(p, b) && p.seq_lens_decoder[b] < 0)
    report(st, kScheduleCacheSlot, static_cast<int32_t>(b), p.seq_lens_decoder[b], 0);
}

FD_HOST_DEVICE inline void schedule_cache_stop(const ScheduleCacheParams& p, int64_t b) {
  p.stop_flags[b] = true;
  p.seq_lens_this_time[b] = 0;
  p.seq_lens_decoder[b] = 0;
  p.seq_lens_encoder[b] = 0;
  p.accept_num[b] = 0;
}

// Returns 1 when request b is stopped afterwards (it counts for not_need_stop).
FD_HOST_DEVICE inline int schedule_cache_apply(const ScheduleCacheParams& p, int64_t b) {
  if (p.stop_flags[b]) return 1;
  if (p.seq_lens_decoder[b] < p.prompt_lens[b]) {  // unfinished chunked prefill
    schedule_cache_stop(p, b);
    return 1;
  }
  if (p.prefill_one_step_stop) {
    schedule_cache_stop(p, b);
    return 1;
  }
  const int64_t slot = schedule_cache_slot(p, b);
  if (slot < p.num_blocks_per_seq && p.block_tables[b * p.num_blocks_per_seq + slot] == -1) {
    // Block step: park the request until its next block is granted.
    p.is_block_step[b] = true;
    p.step_seq_lens_this_time[b] = p.seq_lens_this_time[b];
    p.seq_lens_this_time[b] = 0;
    p.stop_flags[b] = true;
    p.step_seq_lens_decoder[b] = p.seq_lens_decoder[b];
    p.seq_lens_decoder[b] = 0;
    p.accept_num[b] = 0;
    for (int64_t j = 0; j < p.accept_cols; ++j) p.accept_tokens[b * p.accept_cols + j] = -1;
    for (int64_t j = 0; j < p.draft_cols; ++j)
      p.step_draft_tokens[b * p.step_draft_cols + j] = p.draft_tokens[b * p.draft_cols + j];
    return 1;
  }
  return 0;
}

// CPU driver: *stopped = requests b < bsz stopped afterwards (the binding adds
// the max_bsz - bsz empty slots and compares with stop_nums for not_need_stop).
inline KernelStatus schedule_cache_cpu(const ScheduleCacheParams& p, int64_t* stopped) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) schedule_cache_check(p, b, &st);
  if (st.code != 0) return st;
  *stopped = 0;
  for (int64_t b = 0; b < p.bsz; ++b) *stopped += schedule_cache_apply(p, b);
  return st;
}

}  // namespace fd_mtp
