// speculate_set_value_by_flags_and_idx (spec §5.12): the last op of a target
// step. A running request appends the tokens it accepted to its history
// (pre_ids, target convention: generated token k at column k, so the accepted
// tokens land at columns step_idx - accept_num + 1 .. step_idx); a stopped
// request gets accept_num 0 and seq_lens_decoder 0.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum SetValueByFlagsStatus : int32_t {
  kSetValueAcceptNum = 1,
  kSetValuePreIdsColumn = 2,
};

struct SetValueByFlagsParams {
  int64_t* pre_ids_all;  // [bs, pre_ids_cols], written
  int64_t pre_ids_cols;
  const int64_t* accept_tokens;  // [bs, accept_tokens_cols]
  int64_t accept_tokens_cols;
  int32_t* accept_num;  // written
  const bool* stop_flags;
  const int32_t* seq_lens_encoder;
  int32_t* seq_lens_decoder;  // written
  const int64_t* step_idx;
  int64_t bs;
};

// True when request b writes pre_ids.
FD_HOST_DEVICE inline bool set_value_writes_history(const SetValueByFlagsParams& p, int64_t b) {
  if (p.stop_flags[b]) return false;
  if (p.seq_lens_decoder[b] == 0 && p.seq_lens_encoder[b] == 0) return false;
  return p.step_idx[b] > 0;
}

FD_HOST_DEVICE inline void set_value_check(const SetValueByFlagsParams& p, int64_t b,
                                           KernelStatus* st) {
  if (!set_value_writes_history(p, b)) return;
  const int64_t a = p.accept_num[b];
  if (a < 0 || a > p.accept_tokens_cols) {
    report(st, kSetValueAcceptNum, b, a, p.accept_tokens_cols);
    return;
  }
  if (a == 0) return;
  const int64_t last = p.step_idx[b];
  const int64_t first = last - a + 1;
  if (last >= p.pre_ids_cols)
    report(st, kSetValuePreIdsColumn, b, last, p.pre_ids_cols);
  else if (first < 0)
    report(st, kSetValuePreIdsColumn, b, first, p.pre_ids_cols);
}

FD_HOST_DEVICE inline void set_value_apply(const SetValueByFlagsParams& p, int64_t b) {
  if (p.stop_flags[b]) {
    p.accept_num[b] = 0;
    p.seq_lens_decoder[b] = 0;
    return;
  }
  if (!set_value_writes_history(p, b)) return;
  const int64_t a = p.accept_num[b];
  const int64_t step = p.step_idx[b];
  int64_t* row = p.pre_ids_all + b * p.pre_ids_cols;
  const int64_t* acc = p.accept_tokens + b * p.accept_tokens_cols;
  for (int64_t i = 0; i < a; ++i) row[step - i] = acc[a - 1 - i];
}

inline KernelStatus set_value_cpu(const SetValueByFlagsParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bs && st.code == 0; ++b) set_value_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bs; ++b) set_value_apply(p, b);
  return st;
}

}  // namespace fd_mtp
