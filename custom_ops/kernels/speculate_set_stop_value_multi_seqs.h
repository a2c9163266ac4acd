// speculate_set_stop_value_multi_seqs (spec §5.8): after verify, stop a request
// whose output completes one of its stop sequences, replacing the token that
// follows the sequence by end_ids[0].
//
// Candidate ends: for idx = 0 .. accept_num-1 the stop sequence must end just
// before accept_tokens[b, idx], i.e. at the last token of the previous step
// (idx 0, read from pre_ids) or at accept_tokens[b, idx-1]. Deterministic:
// upstream runs one thread per (request, stop sequence) and several hits race
// (last writer wins); here the earliest hit idx over all the request's stop
// sequences wins (hits at the same idx write the same values).
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum SetStopValueStatus : int32_t {
  kStopAcceptNum = 1,
  kStopSeqLen = 2,
  kStopPreIdsColumn = 3,
};

struct SetStopValueParams {
  int64_t* accept_tokens;  // [bs, accept_tokens_cols], written
  int64_t accept_tokens_cols;
  int32_t* accept_num;     // [bs], written
  const int64_t* pre_ids;  // [bs, pre_ids_cols]
  int64_t pre_ids_cols;
  const int64_t* step_idx;
  bool* stop_flags;          // written
  const int64_t* stop_seqs;  // [bs, num_stop_seqs, stop_seq_cols]
  int64_t num_stop_seqs;
  int64_t stop_seq_cols;
  const int32_t* stop_seqs_len;  // [bs, num_stop_seqs]
  const int64_t* end_ids;        // [>= 1]
  int64_t bs;
};

// Whether stop sequence s of request b ends just before accepted token idx.
// A pre_ids index <= 0 fails the comparison (upstream: index 0 holds no token).
FD_HOST_DEVICE inline bool set_stop_value_matches(const SetStopValueParams& p, int64_t b, int64_t s,
                                                  int64_t idx) {
  const int64_t a = p.accept_num[b];
  const int64_t t = p.step_idx[b];
  const int64_t len = p.stop_seqs_len[b * p.num_stop_seqs + s];
  const int64_t* seq = p.stop_seqs + (b * p.num_stop_seqs + s) * p.stop_seq_cols;
  const int64_t* acc = p.accept_tokens + b * p.accept_tokens_cols;
  const int64_t* pre = p.pre_ids + b * p.pre_ids_cols;
  for (int64_t k = len - 1; k >= 0; --k) {
    const int64_t d = len - 1 - k;
    int64_t token;
    if (d < idx) {
      token = acc[idx - 1 - d];
    } else {
      const int64_t j = t - a + idx - d;
      if (j <= 0) return false;
      token = pre[j];
    }
    if (token != seq[k]) return false;
  }
  return true;
}

// Whether candidate idx of stop sequence s is compared at all (upstream skips
// the ends that would need tokens before the start of the output).
FD_HOST_DEVICE inline bool set_stop_value_candidate(const SetStopValueParams& p, int64_t b,
                                                    int64_t len, int64_t idx) {
  return p.step_idx[b] - p.accept_num[b] + idx + 1 >= len;
}

// Validates request b: accept_num and every stop_seqs_len in range, and the
// largest pre_ids column the comparisons can read (step_idx - accept_num, read
// when some compared candidate idx <= len - 1) inside the row.
FD_HOST_DEVICE inline void set_stop_value_check(const SetStopValueParams& p, int64_t b,
                                                KernelStatus* st) {
  if (p.stop_flags[b]) return;
  const int64_t a = p.accept_num[b];
  if (a < 0 || a > p.accept_tokens_cols) {
    report(st, kStopAcceptNum, b, a, p.accept_tokens_cols);
    return;
  }
  bool reads_pre_ids = false;
  for (int64_t s = 0; s < p.num_stop_seqs; ++s) {
    const int64_t len = p.stop_seqs_len[b * p.num_stop_seqs + s];
    if (len < 0 || len > p.stop_seq_cols) {
      report(st, kStopSeqLen, b, len, p.stop_seq_cols);
      return;
    }
    for (int64_t idx = 0; idx < a && idx <= len - 1; ++idx)
      reads_pre_ids |= set_stop_value_candidate(p, b, len, idx);
  }
  const int64_t col = p.step_idx[b] - a;
  if (reads_pre_ids && col >= p.pre_ids_cols) report(st, kStopPreIdsColumn, b, col, p.pre_ids_cols);
}

// Applies the op to request b (after every request passed the check).
FD_HOST_DEVICE inline void set_stop_value_apply(const SetStopValueParams& p, int64_t b) {
  if (p.stop_flags[b]) return;
  const int64_t a = p.accept_num[b];
  int64_t hit = a;  // earliest hit idx over all stop sequences; a = none
  for (int64_t s = 0; s < p.num_stop_seqs; ++s) {
    const int64_t len = p.stop_seqs_len[b * p.num_stop_seqs + s];
    if (len <= 0) continue;
    for (int64_t idx = 0; idx < hit; ++idx) {
      if (!set_stop_value_candidate(p, b, len, idx)) continue;
      if (set_stop_value_matches(p, b, s, idx)) {
        hit = idx;
        break;
      }
    }
  }
  if (hit == a) return;
  p.accept_num[b] = static_cast<int32_t>(hit + 1);
  p.accept_tokens[b * p.accept_tokens_cols + hit] = p.end_ids[0];
  p.stop_flags[b] = true;
}

inline KernelStatus set_stop_value_cpu(const SetStopValueParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bs && st.code == 0; ++b) set_stop_value_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bs; ++b) set_stop_value_apply(p, b);
  return st;
}

}  // namespace fd_mtp
