// mtp_step_paddle (spec §6.6, v0 scheduler only): the proposer's own decode
// KV-block manager. Frees the decode blocks of stopped/dropped requests,
// preempts (drops drafting for) the requests holding the most decode blocks
// while blocks run short, then gives each request that needs one a block.
//
// Deterministic: requests are visited in batch order and the free list is
// appended/popped in that order (upstream's order depends on atomics).
// Where upstream would loop forever (blocks needed, nothing left to preempt)
// or append past the free list, this op reports an error before writing
// anything.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum MtpStepStatus : int32_t {
  kMtpStepOutOfBlocks = 1,
  kMtpStepFreeListFull = 2,
  kMtpStepUsedListLen = 3,
  kMtpStepFreeListLen = 4,
  kMtpStepNegativeDecoder = 5,  // a running request's seq_lens_decoder < 0 (no block slot)
};

struct MtpStepParams {
  const bool* base_model_stop_flags;
  bool* stop_flags;
  bool* batch_drop;
  int32_t* seq_lens_this_time;
  int32_t* seq_lens_decoder;
  int32_t* block_tables;  // [bsz, num_blocks_per_seq]
  int64_t num_blocks_per_seq;
  int32_t* encoder_block_lens;
  int32_t* used_list_len;
  int32_t* free_list;  // [free_list_capacity]
  int64_t free_list_capacity;
  int32_t* free_list_len;  // [1]
  int32_t* need_list;      // workspace [bsz]
  int64_t bsz;
  int32_t block_size;
  int32_t max_draft_tokens;
};

FD_HOST_DEVICE inline bool mtp_step_releases(const MtpStepParams& p, int64_t b) {
  return p.base_model_stop_flags[b] || p.batch_drop[b];
}

// Slot of the block holding position seq_lens_decoder + K + 1 of request b.
FD_HOST_DEVICE inline int64_t mtp_step_next_slot(const MtpStepParams& p, int64_t b) {
  return (static_cast<int64_t>(p.seq_lens_decoder[b]) + p.max_draft_tokens + 1) / p.block_size;
}

// Slot of the block request b needs next, or -1 when it needs none.
FD_HOST_DEVICE inline int64_t mtp_step_needed_slot(const MtpStepParams& p, int64_t b) {
  if (mtp_step_releases(p, b)) return -1;
  const int64_t slot = mtp_step_next_slot(p, b);
  if (slot < 0 || slot >= p.num_blocks_per_seq) return -1;
  return p.block_tables[b * p.num_blocks_per_seq + slot] == -1 ? slot : -1;
}

// Moves decode block i of request b (0 <= i < used_list_len[b]) to
// free_list[offset + i] and clears its slot in the block table.
FD_HOST_DEVICE inline void mtp_step_release_block(const MtpStepParams& p, int64_t b, int64_t i,
                                                  int64_t offset) {
  int32_t* row = p.block_tables + b * p.num_blocks_per_seq + p.encoder_block_lens[b];
  p.free_list[offset + i] = row[i];
  row[i] = -1;
}

// Moves request b's decode blocks to free_list[offset, offset + used) and
// zeroes its used_list_len; returns how many it moved (free_list_len is the
// caller's).
FD_HOST_DEVICE inline int32_t mtp_step_release_blocks_at(const MtpStepParams& p, int64_t b,
                                                         int64_t offset) {
  const int32_t used = p.used_list_len[b];
  for (int32_t i = 0; i < used; ++i) mtp_step_release_block(p, b, i, offset);
  p.used_list_len[b] = 0;
  return used;
}

// Appends request b's decode blocks to the free list and clears them.
FD_HOST_DEVICE inline void mtp_step_release_blocks(const MtpStepParams& p, int64_t b) {
  *p.free_list_len += mtp_step_release_blocks_at(p, b, *p.free_list_len);
}

// Step 3's preemption of request b, after its blocks were released: it stops
// drafting this step.
FD_HOST_DEVICE inline void mtp_step_drop(const MtpStepParams& p, int64_t b) {
  p.stop_flags[b] = true;
  p.batch_drop[b] = true;
  p.seq_lens_this_time[b] = 0;
  p.seq_lens_decoder[b] = 0;
}

// Step 4 for request b (in the need list, not dropped): its next slot gets `block`.
FD_HOST_DEVICE inline void mtp_step_take_block(const MtpStepParams& p, int64_t b, int32_t block) {
  p.used_list_len[b] += 1;
  p.block_tables[b * p.num_blocks_per_seq + mtp_step_next_slot(p, b)] = block;
}

// Step 3's victim key of request b (after step 1): the decode blocks it
// holds, 0 for a stopped request. The victim has the largest key, the lowest
// index on ties.
FD_HOST_DEVICE inline int32_t mtp_step_victim_key(const MtpStepParams& p, int64_t b) {
  return p.base_model_stop_flags[b] ? 0 : p.used_list_len[b];
}

// The per-request part of mtp_step_check: reports the first problem of
// request b and returns false, or returns true.
FD_HOST_DEVICE inline bool mtp_step_check_request(const MtpStepParams& p, int64_t b,
                                                  KernelStatus* st) {
  const int64_t used = p.used_list_len[b];
  if (used < 0 || p.encoder_block_lens[b] < 0 ||
      p.encoder_block_lens[b] + used > p.num_blocks_per_seq) {
    report(st, kMtpStepUsedListLen, b, used,
           p.num_blocks_per_seq - (p.encoder_block_lens[b] > 0 ? p.encoder_block_lens[b] : 0));
    return false;
  }
  if (!mtp_step_releases(p, b) && p.seq_lens_decoder[b] < 0) {
    report(st, kMtpStepNegativeDecoder, b, p.seq_lens_decoder[b], 0);
    return false;
  }
  return true;
}

// Validates the whole batch without writing: every append stays inside the
// free list, and preemption can free enough blocks.
// `st` must start zeroed.
FD_HOST_DEVICE inline void mtp_step_check(const MtpStepParams& p, KernelStatus* st) {
  const int64_t free_len = *p.free_list_len;
  if (free_len < 0 || free_len > p.free_list_capacity) {
    report(st, kMtpStepFreeListLen, -1, free_len, p.free_list_capacity);
    return;
  }
  int64_t released = 0, preemptible = 0, need = 0;
  for (int64_t b = 0; b < p.bsz; ++b) {
    if (!mtp_step_check_request(p, b, st)) return;
    const int64_t used = p.used_list_len[b];
    if (mtp_step_releases(p, b)) {
      released += used;
    } else {
      preemptible += used;
      need += mtp_step_needed_slot(p, b) >= 0;
    }
  }
  if (need > free_len + released + preemptible) {
    report(st, kMtpStepOutOfBlocks, -1, need, free_len + released + preemptible);
    return;
  }
  // Replay step 3 on counts only: victims go in order of decode blocks held
  // (descending, lowest index first) until enough blocks are free.
  int64_t free_after = free_len + released;
  int64_t last_used = INT64_MAX, last_b = -1;
  while (need > free_after) {
    int64_t victim = -1, most = -1;
    for (int64_t b = 0; b < p.bsz; ++b) {
      if (mtp_step_releases(p, b)) continue;
      const int64_t used = p.used_list_len[b];
      const bool after_last = used < last_used || (used == last_used && b > last_b);
      if (after_last && used > most) {
        most = used;
        victim = b;
      }
    }
    free_after += most;  // most > 0: guaranteed by the check above
    last_used = most;
    last_b = victim;
  }
  if (free_after > p.free_list_capacity)
    report(st, kMtpStepFreeListFull, -1, free_after, p.free_list_capacity);
}

// The whole op, sequentially. Call after mtp_step_check succeeded.
FD_HOST_DEVICE inline void mtp_step_apply(const MtpStepParams& p) {
  // 1. Free the decode blocks of stopped or dropped requests.
  for (int64_t b = 0; b < p.bsz; ++b) {
    if (mtp_step_releases(p, b) && p.used_list_len[b] > 0) {
      mtp_step_release_blocks(p, b);
      p.encoder_block_lens[b] = 0;
    }
  }
  // 2. Who needs a block for position seq_lens_decoder + K + 1.
  int64_t need = 0;
  for (int64_t b = 0; b < p.bsz; ++b)
    if (mtp_step_needed_slot(p, b) >= 0) p.need_list[need++] = static_cast<int32_t>(b);
  // 3. While short, drop drafting for the request holding the most decode
  //    blocks (lowest index on ties). A dropped request stays in the need
  //    list (upstream quirk) and is skipped in step 4.
  while (need > *p.free_list_len) {
    int64_t victim = 0;
    int32_t most = -1;
    for (int64_t b = 0; b < p.bsz; ++b) {
      const int32_t used = mtp_step_victim_key(p, b);
      if (used > most) {
        most = used;
        victim = b;
      }
    }
    mtp_step_release_blocks(p, victim);  // most > 0: guaranteed by mtp_step_check
    mtp_step_drop(p, victim);
  }
  // 4. Give each remaining needy request one block.
  for (int64_t i = 0; i < need; ++i) {
    const int64_t b = p.need_list[i];
    if (p.batch_drop[b]) continue;
    *p.free_list_len -= 1;
    mtp_step_take_block(p, b, p.free_list[*p.free_list_len]);
  }
}

inline KernelStatus mtp_step_cpu(const MtpStepParams& p) {
  KernelStatus st{};
  mtp_step_check(p, &st);
  if (st.code == 0) mtp_step_apply(p);
  return st;
}

}  // namespace fd_mtp
