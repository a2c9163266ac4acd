// speculate_step_paddle (spec §5.13, v0 scheduler only): the target's decode
// KV-block manager.
//   1. Finished requests (stopped, not block-stepped) return their decode
//      blocks; running requests whose slot (dec + K + 1) // block_size is -1
//      join the need list (batch order).
//   2. While the need list is longer than the free list, the request holding
//      the most decode blocks (ties: lowest index; requests holding the
//      maximum max_decoder_block_num are spared until nothing else is left)
//      is preempted: its decode blocks are freed, it is stopped and marked
//      block-stepped, pushed on step_block_list, and leaves the need list.
//   3. Each needy request still running pops a block from the free-list top.
//   4. At most one block-stepped request (the last pushed, LIFO) is recovered
//      when enough blocks are free: it gets used_list_len + 1 blocks (at most
//      max_decoder_block_num - encoder_block_lens) and is re-prefilled with
//      its prompt followed by the tokens generated so far.
//
// Deterministic, unlike upstream (atomics decide the order there): the need
// list is in batch order, freed blocks are appended request by request in
// batch order, allocations pop in need-list order. `speculate_step_check`
// replays the whole call on counts before anything is written; where upstream
// would loop forever (blocks needed, nothing preemptible) or write outside a
// list, a block-table row or an input_ids row, the op reports an error and
// writes nothing. No batch cap (upstream: bsz <= 256).
//
// Two variants share every function below (the `variant` field; each has its
// own CPU driver and launcher, which set it):
//   * speculate_step_system_cache (prefix caching): identical, except that a
//     recovered request's seq_lens_decoder is restored from
//     ori_seq_lens_decoder (its cached prefix) instead of being left at 0.
//   * speculate_step_reschedule (FD_DISABLED_RECOVER=1): preempted requests go
//     back to the scheduler, not to step_block_list. Phase 1 frees every
//     stopped request (block-stepped or not); phase 2 preempts the request
//     holding the most decode blocks with no exemption (is_block_step and
//     max_decoder_block_num are not consulted), zeroes its
//     encoder_block_lens and used_list_len as well, and neither marks it
//     block-stepped nor touches accept_num; there is no phase 4 and no
//     re-prefill. The step, recover, input_ids, pre_ids and step_idx
//     arguments are not read (their pointers may be null).
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum SpeculateStepVariant : int32_t {
  kStepPaddle = 0,
  kStepSystemCache = 1,
  kStepReschedule = 2,
};

enum SpeculateStepStatus : int32_t {
  kStepOutOfBlocks = 1,
  kStepFreeListFull = 2,
  kStepUsedListLen = 3,
  kStepFreeListLen = 4,
  kStepStepLens = 5,
  kStepStepListFull = 6,
  kStepStepListEntry = 7,
  kStepNeedLen = 8,
  kStepRecoverLens = 9,
  kStepNeedListFull = 10,
  kStepRecoverListFull = 11,
  kStepDecoder = 12,
  kStepRecoverBlocks = 13,
  kStepOriLen = 14,
  kStepStepIdx = 15,
  kStepInputIds = 16,
};

struct SpeculateStepParams {
  bool* stop_flags;
  int32_t* seq_lens_this_time;
  const int32_t* ori_seq_lens_encoder;
  int32_t* seq_lens_encoder;
  int32_t* seq_lens_decoder;
  int32_t* block_tables;  // [>=bsz, num_blocks_per_seq]
  int64_t num_blocks_per_seq;
  int32_t* encoder_block_lens;
  bool* is_block_step;
  int32_t* step_block_list;  // [step_list_capacity]
  int64_t step_list_capacity;
  int32_t* step_lens;           // [1]
  int32_t* recover_block_list;  // [recover_list_capacity]
  int64_t recover_list_capacity;
  int32_t* recover_lens;     // [1]
  int32_t* need_block_list;  // [need_list_capacity]
  int64_t need_list_capacity;
  int32_t* need_block_len;  // [1]
  int32_t* used_list_len;
  int32_t* free_list;  // [free_list_capacity]
  int64_t free_list_capacity;
  int32_t* free_list_len;  // [1]
  int64_t* input_ids;      // [>=bsz, input_ids_cols]
  int64_t input_ids_cols;
  const int64_t* pre_ids;  // [>=bsz, pre_ids_cols]
  int64_t pre_ids_cols;
  const int64_t* step_idx;
  int64_t* first_token_ids;
  int32_t* accept_num;
  int64_t bsz;
  int32_t block_size;
  int32_t max_draft_tokens;
  // speculate_step_system_cache: seq_lens_decoder of a recovered request (else null).
  const int32_t* ori_seq_lens_decoder;
  int32_t variant;  // SpeculateStepVariant, set by the driver / launcher of each op
};

FD_HOST_DEVICE inline int64_t step_max_decoder_blocks(const SpeculateStepParams& p) {
  return p.input_ids_cols / p.block_size;
}

FD_HOST_DEVICE inline bool step_reschedules(const SpeculateStepParams& p) {
  return p.variant == kStepReschedule;
}

// Stopped and not block-stepped: the request is done; its decode blocks go back
// (reschedule: every stopped request; it never block-steps one).
FD_HOST_DEVICE inline bool step_finished(const SpeculateStepParams& p, int64_t b) {
  return p.stop_flags[b] && (step_reschedules(p) || !p.is_block_step[b]);
}

FD_HOST_DEVICE inline int64_t step_slot(const SpeculateStepParams& p, int64_t b) {
  return (static_cast<int64_t>(p.seq_lens_decoder[b]) + p.max_draft_tokens + 1) / p.block_size;
}

// Request b joins the need list in phase 1 (evaluated on the input state;
// seq_lens_decoder >= 0 checked before).
FD_HOST_DEVICE inline bool step_needs_block(const SpeculateStepParams& p, int64_t b) {
  if (step_finished(p, b) || p.seq_lens_this_time[b] == 0) return false;
  const int64_t slot = step_slot(p, b);
  return slot < p.num_blocks_per_seq && p.block_tables[b * p.num_blocks_per_seq + slot] == -1;
}

// Moves decode block i of request b to free_list[free_base + i] and clears it in its row.
FD_HOST_DEVICE inline void step_release_block_at(const SpeculateStepParams& p, int64_t b, int64_t i,
                                                 int64_t free_base) {
  int32_t* row = p.block_tables + b * p.num_blocks_per_seq + p.encoder_block_lens[b];
  p.free_list[free_base + i] = row[i];
  row[i] = -1;
}

// Decode blocks request b holds after phase 1 (finished requests hold none).
FD_HOST_DEVICE inline int64_t step_used_after_release(const SpeculateStepParams& p, int64_t b) {
  return step_finished(p, b) ? 0 : p.used_list_len[b];
}

// Preemption candidate in the pass with `flag` = step_max_block_flag.
FD_HOST_DEVICE inline bool step_eligible(const SpeculateStepParams& p, int64_t b, bool flag,
                                         int64_t max_dec_blocks) {
  if (step_reschedules(p)) return true;  // any holder (a victim drops to 0 blocks)
  if (p.is_block_step[b]) return false;
  const int64_t used = step_used_after_release(p, b);
  // With the flag set, the requests preempted before it was set are block-stepped
  // by then: those are the candidates of the first pass that held blocks.
  if (flag) return used == max_dec_blocks || used == 0;
  return used != max_dec_blocks;
}

// ---------------------------------------------------------------------------
// The check, in pieces that the CPU driver runs in order and the CUDA kernel
// runs with the per-request parts spread over a block (speculate_step.cu).
// Each piece reports through `st` and returns false on the first problem.

// Phase 1 on counts: blocks released by finished requests, needy requests.
struct StepCounts {
  int64_t released, need, need_stopped;
};

// Phases 2-4 on counts: the victim replay's state.
struct StepReplay {
  int64_t free_len;           // the free list's length as the replay goes
  int64_t removed, pushed;    // victims that left the need list; victims pushed
  int64_t last_victim;        // the latest victim (-1: none)
  int64_t last_used, last_b;  // the cursor: the latest victim's holding and index
  bool flag;                  // step_max_block_flag
};

// The list lengths, before any request is read.
FD_HOST_DEVICE inline bool speculate_step_check_lists(const SpeculateStepParams& p,
                                                      KernelStatus* st) {
  const int64_t free_len0 = *p.free_list_len;
  if (free_len0 < 0 || free_len0 > p.free_list_capacity) {
    report(st, kStepFreeListLen, -1, free_len0, p.free_list_capacity);
    return false;
  }
  const int64_t step_lens0 = step_reschedules(p) ? 0 : *p.step_lens;
  if (step_lens0 < 0 || step_lens0 > p.step_list_capacity) {
    report(st, kStepStepLens, -1, step_lens0, p.step_list_capacity);
    return false;
  }
  if (*p.need_block_len != 0) {
    report(st, kStepNeedLen, -1, *p.need_block_len, 0);
    return false;
  }
  if (!step_reschedules(p) && *p.recover_lens != 0) {
    report(st, kStepRecoverLens, -1, *p.recover_lens, 0);
    return false;
  }
  return true;
}

// Request b: its lengths, and its share of the phase-1 counts.
FD_HOST_DEVICE inline bool speculate_step_check_request(const SpeculateStepParams& p, int64_t b,
                                                        StepCounts* c, KernelStatus* st) {
  const int64_t nb = p.num_blocks_per_seq;
  const int64_t enc = p.encoder_block_lens[b], used = p.used_list_len[b];
  if (used < 0 || enc < 0 || enc + used > nb) {
    report(st, kStepUsedListLen, static_cast<int32_t>(b), used, nb - (enc > 0 ? enc : 0));
    return false;
  }
  if (step_finished(p, b)) {
    c->released += used;
  } else if (p.seq_lens_this_time[b] != 0) {
    if (p.seq_lens_decoder[b] < 0) {
      report(st, kStepDecoder, static_cast<int32_t>(b), p.seq_lens_decoder[b], 0);
      return false;
    }
    if (step_needs_block(p, b)) {
      c->need += 1;
      c->need_stopped += p.stop_flags[b];
    }
  }
  return true;
}

// The totals of phase 1; starts the replay.
FD_HOST_DEVICE inline bool speculate_step_check_totals(const SpeculateStepParams& p,
                                                       const StepCounts& c, StepReplay* r,
                                                       KernelStatus* st) {
  if (c.need > p.need_list_capacity) {
    report(st, kStepNeedListFull, -1, c.need, p.need_list_capacity);
    return false;
  }
  const int64_t free_len = *p.free_list_len + c.released;
  if (free_len > p.free_list_capacity) {
    report(st, kStepFreeListFull, -1, free_len, p.free_list_capacity);
    return false;
  }
  *r = StepReplay{free_len, 0, 0, -1, INT64_MAX, -1, false};
  return true;
}

// Phase 2 on counts. Preempting a request changes nobody else's holdings, so the
// victims of one pass come in (holdings descending, index ascending) order: the
// cursor (last_used, last_b) walks that order. The replay goes on while this holds.
FD_HOST_DEVICE inline bool step_replay_short(const StepCounts& c, const StepReplay& r) {
  return c.need - r.removed > r.free_len;
}

// Request b's key in the replay's next victim search: the blocks it holds, or -1
// when it is not a candidate. The victim is the largest key > 0, lowest index first.
FD_HOST_DEVICE inline int64_t step_replay_key(const SpeculateStepParams& p, const StepReplay& r,
                                              int64_t b) {
  if (!step_eligible(p, b, r.flag, step_max_decoder_blocks(p))) return -1;
  const int64_t used = step_used_after_release(p, b);
  const bool after_cursor = used < r.last_used || (used == r.last_used && b > r.last_b);
  return after_cursor ? used : -1;
}

// One replayed preemption: `victim` (-1: none) holding `most` blocks.
FD_HOST_DEVICE inline bool speculate_step_check_victim(const SpeculateStepParams& p,
                                                       const StepCounts& c, StepReplay* r,
                                                       int64_t victim, int64_t most,
                                                       KernelStatus* st) {
  if (victim < 0) {
    if (r->flag || step_reschedules(p)) {  // upstream spins forever here
      report(st, kStepOutOfBlocks, -1, c.need - r->removed, r->free_len);
      return false;
    }
    r->flag = true;
    r->last_used = INT64_MAX;
    r->last_b = -1;
    return true;
  }
  const int64_t step_lens0 = step_reschedules(p) ? 0 : *p.step_lens;
  if (!step_reschedules(p) && step_lens0 + r->pushed >= p.step_list_capacity) {
    report(st, kStepStepListFull, static_cast<int32_t>(victim), step_lens0 + r->pushed + 1,
           p.step_list_capacity);
    return false;
  }
  if (r->free_len + most > p.free_list_capacity) {
    report(st, kStepFreeListFull, -1, r->free_len + most, p.free_list_capacity);
    return false;
  }
  r->free_len += most;
  r->pushed += 1;
  r->removed += step_needs_block(p, victim);
  r->last_victim = victim;
  r->last_used = most;
  r->last_b = victim;
  return true;
}

// Phase 3 on counts, then phase 4 and the re-prefill.
FD_HOST_DEVICE inline bool speculate_step_check_recovery(const SpeculateStepParams& p,
                                                         const StepCounts& c, const StepReplay& rp,
                                                         KernelStatus* st) {
  // Phase 3: every remaining entry of the need list that is not stopped pops one.
  const int64_t free_len = rp.free_len - (c.need - rp.removed - c.need_stopped);
  if (step_reschedules(p)) return true;  // no phase 4
  const int64_t step_lens = *p.step_lens + rp.pushed;
  if (step_lens == 0) return true;
  const int64_t r = rp.pushed > 0 ? rp.last_victim : p.step_block_list[step_lens - 1];
  if (r < 0 || r >= p.bsz) {
    report(st, kStepStepListEntry, -1, r, p.bsz);
    return false;
  }
  const int64_t nb = p.num_blocks_per_seq;
  const int64_t mdb = step_max_decoder_blocks(p);
  int64_t used_r, enc_r;
  if (rp.pushed > 0) {  // a victim keeps used_list_len (its blocks are re-granted on recovery)
    used_r = p.used_list_len[r];
    enc_r = p.encoder_block_lens[r];
  } else {
    const bool released_r = step_finished(p, r) && p.used_list_len[r] > 0;
    used_r = step_used_after_release(p, r);
    enc_r = released_r ? 0 : p.encoder_block_lens[r];
    if (step_needs_block(p, r) && !p.stop_flags[r]) used_r += 1;  // popped in phase 3
  }
  const int64_t want = used_r + 1 < mdb - enc_r ? used_r + 1 : mdb - enc_r;
  if (free_len < want) return true;  // not enough blocks yet: stays block-stepped
  if (p.recover_list_capacity < 1) {
    report(st, kStepRecoverListFull, static_cast<int32_t>(r), 1, p.recover_list_capacity);
    return false;
  }
  if (want < 0 || enc_r + want > nb) {
    report(st, kStepRecoverBlocks, static_cast<int32_t>(r), enc_r + want, nb);
    return false;
  }
  const int64_t ori = p.ori_seq_lens_encoder[r];
  const int64_t steps = p.step_idx[r];
  if (ori < 0) {
    report(st, kStepOriLen, static_cast<int32_t>(r), ori, 0);
    return false;
  }
  if (steps < 0 || (steps > 0 && steps + 1 > p.pre_ids_cols)) {
    report(st, kStepStepIdx, static_cast<int32_t>(r), steps, p.pre_ids_cols - 1);
    return false;
  }
  if (p.input_ids_cols < 1 || ori + steps > p.input_ids_cols) {
    report(st, kStepInputIds, static_cast<int32_t>(r), ori + steps, p.input_ids_cols);
    return false;
  }
  return true;
}

// Validates the whole call without writing: replays phases 1-4 and the
// re-prefill on counts. `st` must start zeroed.
FD_HOST_DEVICE inline void speculate_step_check(const SpeculateStepParams& p, KernelStatus* st) {
  if (!speculate_step_check_lists(p, st)) return;
  StepCounts c{0, 0, 0};
  for (int64_t b = 0; b < p.bsz; ++b)
    if (!speculate_step_check_request(p, b, &c, st)) return;
  StepReplay r;
  if (!speculate_step_check_totals(p, c, &r, st)) return;
  while (step_replay_short(c, r)) {
    int64_t victim = -1, most = 0;
    for (int64_t b = 0; b < p.bsz; ++b) {
      const int64_t key = step_replay_key(p, r, b);
      if (key > most) {
        most = key;
        victim = b;
      }
    }
    if (!speculate_step_check_victim(p, c, &r, victim, most, st)) return;
  }
  speculate_step_check_recovery(p, c, r, st);
}

// ---------------------------------------------------------------------------
// The apply, in the pieces the CUDA kernel shares. free_len is the free list's
// length as the call goes (written back to *free_list_len at the end).

// Request b's key in phase 2's victim search, `flag` = step_max_block_flag: the
// blocks it holds, or -1 when it is exempt. The victim: the largest key > 0,
// lowest index first.
FD_HOST_DEVICE inline int64_t step_victim_key(const SpeculateStepParams& p, int64_t b, bool flag) {
  if (!step_reschedules(p) &&
      (p.is_block_step[b] || (!flag && p.used_list_len[b] == step_max_decoder_blocks(p))))
    return -1;
  return p.used_list_len[b];
}

// The victim's state once its blocks are back on the free list (its need-list
// entry is cleared by the caller).
FD_HOST_DEVICE inline void step_preempt(const SpeculateStepParams& p, int64_t victim) {
  if (step_reschedules(p)) {  // handed back to the scheduler: holds nothing
    p.encoder_block_lens[victim] = 0;
    p.used_list_len[victim] = 0;
  } else {  // used_list_len is kept for the recovery
    p.step_block_list[(*p.step_lens)++] = static_cast<int32_t>(victim);
    p.is_block_step[victim] = true;
    p.accept_num[victim] = 0;
  }
  p.stop_flags[victim] = true;
  p.seq_lens_this_time[victim] = 0;
  p.seq_lens_decoder[victim] = 0;
}

// Phase 3 for need-list entry b: still running, it takes `block` at its slot.
FD_HOST_DEVICE inline bool step_takes_block(const SpeculateStepParams& p, int32_t b) {
  return b != -1 && !p.stop_flags[b];
}
FD_HOST_DEVICE inline void step_take_block(const SpeculateStepParams& p, int64_t b, int32_t block) {
  p.used_list_len[b] += 1;
  p.block_tables[b * p.num_blocks_per_seq + step_slot(p, b)] = block;
}

// Phase 4: the last pushed block-stepped request is recovered when `free_len`
// blocks are enough; it joins the recover list.
FD_HOST_DEVICE inline void step_recover(const SpeculateStepParams& p, int64_t free_len) {
  if (*p.step_lens == 0) return;
  const int32_t r = p.step_block_list[*p.step_lens - 1];
  const int32_t grow = p.used_list_len[r] + 1;
  const int32_t room = static_cast<int32_t>(step_max_decoder_blocks(p)) - p.encoder_block_lens[r];
  const int32_t want = grow < room ? grow : room;
  if (free_len >= want) {
    p.recover_block_list[(*p.recover_lens)++] = r;
    p.is_block_step[r] = false;
    p.used_list_len[r] = want;
    p.step_block_list[*p.step_lens - 1] = -1;
    *p.step_lens -= 1;
  }
}

// The re-prefill of recovered request r: its lengths and first token. Its blocks
// (step_regrant_block) and generated tokens (step_refill_token) follow.
FD_HOST_DEVICE inline void step_reprefill(const SpeculateStepParams& p, int64_t r) {
  const int32_t seq = p.ori_seq_lens_encoder[r] + static_cast<int32_t>(p.step_idx[r]);
  p.seq_lens_this_time[r] = seq;
  p.seq_lens_encoder[r] = seq;
  if (p.variant == kStepSystemCache) p.seq_lens_decoder[r] = p.ori_seq_lens_decoder[r];
  p.stop_flags[r] = false;
  p.input_ids[r * p.input_ids_cols] = p.first_token_ids[r];
}

// Decode block j of recovered request r: popped from the free list's top.
FD_HOST_DEVICE inline void step_regrant_block(const SpeculateStepParams& p, int64_t r, int64_t j,
                                              int64_t free_len) {
  p.block_tables[r * p.num_blocks_per_seq + p.encoder_block_lens[r] + j] =
      p.free_list[free_len - 1 - j];
}

// Generated token j of recovered request r, after its prompt (ids[0] is written first).
FD_HOST_DEVICE inline void step_refill_token(const SpeculateStepParams& p, int64_t r, int64_t j) {
  p.input_ids[r * p.input_ids_cols + p.ori_seq_lens_encoder[r] + j] =
      p.pre_ids[r * p.pre_ids_cols + j + 1];
}

// The whole op, sequentially. Call after speculate_step_check succeeded.
FD_HOST_DEVICE inline void speculate_step_apply(const SpeculateStepParams& p) {
  int64_t free_len = *p.free_list_len;
  // 1. Finished requests give their decode blocks back (batch order); who needs a block.
  for (int64_t b = 0; b < p.bsz; ++b) {
    if (step_finished(p, b)) {
      p.first_token_ids[b] = -1;
      if (p.used_list_len[b] > 0) {
        for (int64_t i = 0; i < p.used_list_len[b]; ++i) step_release_block_at(p, b, i, free_len);
        free_len += p.used_list_len[b];
        p.encoder_block_lens[b] = 0;
        p.used_list_len[b] = 0;
      }
    } else if (step_needs_block(p, b)) {
      p.need_block_list[(*p.need_block_len)++] = static_cast<int32_t>(b);
    }
  }
  // 2. Preempt while short.
  const int64_t listed = *p.need_block_len;
  bool flag = false;
  while (*p.need_block_len > free_len) {
    int64_t victim = -1, most = 0;
    for (int64_t b = 0; b < p.bsz; ++b) {
      const int64_t key = step_victim_key(p, b, flag);
      if (key > most) {
        most = key;
        victim = b;
      }
    }
    if (victim < 0) {
      if (flag) return;  // unreachable: speculate_step_check reports it
      flag = true;
      continue;
    }
    for (int64_t i = 0; i < most; ++i) step_release_block_at(p, victim, i, free_len);
    free_len += most;
    for (int64_t i = 0; i < listed; ++i) {
      if (p.need_block_list[i] == victim) {
        p.need_block_list[i] = -1;
        *p.need_block_len -= 1;
        break;
      }
    }
    step_preempt(p, victim);
  }
  // 3. Allocate in need-list order from the free-list top.
  for (int64_t i = 0; i < listed; ++i) {
    const int32_t b = p.need_block_list[i];
    if (step_takes_block(p, b)) step_take_block(p, b, p.free_list[--free_len]);
    p.need_block_list[i] = -1;
  }
  *p.need_block_len = 0;
  if (!step_reschedules(p)) {
    // 4. Recover at most one block-stepped request (the last pushed), and re-prefill it:
    //    prompt + generated tokens, its blocks back.
    step_recover(p, free_len);
    for (int32_t i = 0; i < *p.recover_lens; ++i) {
      const int64_t r = p.recover_block_list[i];
      step_reprefill(p, r);
      for (int64_t j = 0; j < p.used_list_len[r]; ++j) step_regrant_block(p, r, j, free_len);
      free_len -= p.used_list_len[r];
      for (int64_t j = 0; j < p.step_idx[r]; ++j) step_refill_token(p, r, j);
    }
    *p.recover_lens = 0;
  }
  *p.free_list_len = static_cast<int32_t>(free_len);
}

inline KernelStatus speculate_step_run_cpu(SpeculateStepParams p, SpeculateStepVariant variant) {
  p.variant = variant;
  KernelStatus st{};
  speculate_step_check(p, &st);
  if (st.code == 0) speculate_step_apply(p);
  return st;
}

// The CPU drivers of the three ops.
inline KernelStatus speculate_step_cpu(const SpeculateStepParams& p) {
  return speculate_step_run_cpu(p, kStepPaddle);
}
inline KernelStatus speculate_step_system_cache_cpu(const SpeculateStepParams& p) {
  return speculate_step_run_cpu(p, kStepSystemCache);
}
inline KernelStatus speculate_step_reschedule_cpu(const SpeculateStepParams& p) {
  return speculate_step_run_cpu(p, kStepReschedule);
}

}  // namespace fd_mtp
