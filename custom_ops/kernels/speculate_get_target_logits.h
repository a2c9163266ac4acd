// speculate_get_target_logits (spec §5.18, docs/spec/logprobs.md): gathers the
// target's logits rows of the tokens a step accepted. Request b copies rows
// logits[ori[b] + j] to target_logits[cu[b] + j] for j < rows(b): one row for
// a prefill request (seq_lens_encoder > 0), else its accept_num (none when
// <= 0).
#pragma once

#include <algorithm>
#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum GetTargetLogitsStatus : int32_t {
  kTargetLogitsTargetRows = 1,  // rows written past target_logits
  kTargetLogitsLogitsRows = 2,  // rows read past logits
  kTargetLogitsStart = 3,       // cu_batch_token_offset[b] < 0
  kTargetLogitsOriStart = 4,    // ori_cu_batch_token_offset[b] < 0
};

struct GetTargetLogitsParams {
  float* target_logits;                      // [target_rows, vocab], written
  const float* logits;                       // [logits_rows, vocab]
  const int32_t* cu_batch_token_offset;      // [>=bsz]
  const int32_t* ori_cu_batch_token_offset;  // [>=bsz]
  const int32_t* seq_lens_this_time;         // [bsz]
  const int32_t* seq_lens_encoder;           // [>=bsz]
  const int32_t* accept_num;                 // [>=bsz]
  int64_t bsz;
  int64_t vocab;
  int64_t target_rows;
  int64_t logits_rows;
};

// Rows request b copies.
FD_HOST_DEVICE inline int64_t target_logits_rows(const GetTargetLogitsParams& p, int64_t b) {
  if (p.seq_lens_encoder[b] > 0) return 1;
  return p.accept_num[b] > 0 ? p.accept_num[b] : 0;
}

FD_HOST_DEVICE inline void get_target_logits_check(const GetTargetLogitsParams& p, int64_t b,
                                                   KernelStatus* st) {
  const int32_t r = static_cast<int32_t>(b);
  const int64_t n = target_logits_rows(p, b);
  if (n == 0) return;
  const int64_t dst = p.cu_batch_token_offset[b];
  const int64_t src = p.ori_cu_batch_token_offset[b];
  if (dst < 0) report(st, kTargetLogitsStart, r, dst, 0);
  if (src < 0) report(st, kTargetLogitsOriStart, r, src, 0);
  if (dst + n > p.target_rows) report(st, kTargetLogitsTargetRows, r, dst + n, p.target_rows);
  if (src + n > p.logits_rows) report(st, kTargetLogitsLogitsRows, r, src + n, p.logits_rows);
}

// Source and destination of copied row j (< rows(b)) of request b.
FD_HOST_DEVICE inline const float* target_logits_source_row(const GetTargetLogitsParams& p,
                                                            int64_t b, int64_t j) {
  return p.logits + (static_cast<int64_t>(p.ori_cu_batch_token_offset[b]) + j) * p.vocab;
}

FD_HOST_DEVICE inline float* target_logits_dest_row(const GetTargetLogitsParams& p, int64_t b,
                                                    int64_t j) {
  return p.target_logits + (static_cast<int64_t>(p.cu_batch_token_offset[b]) + j) * p.vocab;
}

inline KernelStatus get_target_logits_cpu(const GetTargetLogitsParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) get_target_logits_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bsz; ++b) {  // the request's rows are contiguous on both sides
    const float* src = target_logits_source_row(p, b, 0);
    std::copy(src, src + target_logits_rows(p, b) * p.vocab, target_logits_dest_row(p, b, 0));
  }
  return st;
}

}  // namespace fd_mtp
