// speculate_get_logits (spec §5.18, docs/spec/logprobs.md): gathers the draft
// model's logits rows of one step into a packed matrix, request by request,
// and writes the per-request row counts and their prefix sums.
//
// Request b reads next(b) rows of `logits` (1 for a prefill, enc > 0; else
// seq_lens_this_time) and writes batch(b) rows of `draft_logits` (2 for a
// prefill: first_token_logits[b] then its logits row; else its
// seq_lens_this_time rows). The offsets' index 0 is left as the caller set it
// and is request 0's start; request b > 0 starts at the prefix sum of the
// counts before it (upstream's inclusive scan into entries 1..bsz).
//
// The CPU driver and the CUDA kernels share: the counts, the per-request check
// (given the request's starts) and the per-element copy.
#pragma once

#include <algorithm>
#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum GetLogitsStatus : int32_t {
  kGetLogitsThisTime = 1,      // a decode request's seq_lens_this_time < 0
  kGetLogitsNextOffsets = 2,   // cu_next_token_offset shorter than bsz + 1
  kGetLogitsBatchOffsets = 3,  // cu_batch_token_offset shorter than bsz + 1
  kGetLogitsNextStart = 4,     // cu_next_token_offset[0] < 0
  kGetLogitsBatchStart = 5,    // cu_batch_token_offset[0] < 0
  kGetLogitsLogitsRows = 6,    // rows read past logits
  kGetLogitsDraftRows = 7,     // rows written past draft_logits
};

struct GetLogitsParams {
  float* draft_logits;                // [draft_rows, vocab], written
  int32_t* next_token_num;            // [>=bsz], written
  int32_t* batch_token_num;           // [>=bsz], written
  int32_t* cu_next_token_offset;      // [cu_next_len >= bsz + 1], written (1..bsz)
  int32_t* cu_batch_token_offset;     // [cu_batch_len >= bsz + 1], written (1..bsz)
  const float* logits;                // [logits_rows, vocab]
  const float* first_token_logits;    // [>=bsz, vocab]
  const int32_t* seq_lens_this_time;  // [bsz]
  const int32_t* seq_lens_encoder;    // [>=bsz]
  int64_t bsz;
  int64_t vocab;
  int64_t draft_rows;
  int64_t logits_rows;
  int64_t cu_next_len;
  int64_t cu_batch_len;
};

constexpr int64_t kGetLogitsInt32Max = 2147483647;

// Rows of `logits` request b reads.
FD_HOST_DEVICE inline int64_t get_logits_next_count(const GetLogitsParams& p, int64_t b) {
  return p.seq_lens_encoder[b] > 0 ? 1 : p.seq_lens_this_time[b];
}

// Rows of `draft_logits` request b writes.
FD_HOST_DEVICE inline int64_t get_logits_batch_count(const GetLogitsParams& p, int64_t b) {
  return p.seq_lens_encoder[b] > 0 ? 2 : p.seq_lens_this_time[b];
}

// Batch-level checks (offsets long enough); request-independent.
FD_HOST_DEVICE inline void get_logits_check_batch(const GetLogitsParams& p, KernelStatus* st) {
  if (p.bsz == 0) return;
  if (p.cu_next_len < p.bsz + 1) report(st, kGetLogitsNextOffsets, -1, p.cu_next_len, p.bsz + 1);
  if (p.cu_batch_len < p.bsz + 1) report(st, kGetLogitsBatchOffsets, -1, p.cu_batch_len, p.bsz + 1);
}

// Request b with its starts: `next_start` / `batch_start` are the prefix sums
// of the counts of the requests before b, or for b = 0 the offsets' index 0.
// The ends must stay inside the matrices and inside int32 (the offsets' type).
FD_HOST_DEVICE inline void get_logits_check(const GetLogitsParams& p, int64_t b, int64_t next_start,
                                            int64_t batch_start, KernelStatus* st) {
  const int32_t r = static_cast<int32_t>(b);
  if (p.seq_lens_encoder[b] <= 0 && p.seq_lens_this_time[b] < 0) {
    report(st, kGetLogitsThisTime, r, p.seq_lens_this_time[b], 0);
    return;
  }
  const int64_t n = get_logits_next_count(p, b);
  const int64_t m = get_logits_batch_count(p, b);
  if (n > 0 && next_start < 0) report(st, kGetLogitsNextStart, r, next_start, 0);
  if (m > 0 && batch_start < 0) report(st, kGetLogitsBatchStart, r, batch_start, 0);
  const int64_t next_limit =
      p.logits_rows < kGetLogitsInt32Max ? p.logits_rows : kGetLogitsInt32Max;
  const int64_t batch_limit = p.draft_rows < kGetLogitsInt32Max ? p.draft_rows : kGetLogitsInt32Max;
  if (n > 0 && next_start + n > next_limit)
    report(st, kGetLogitsLogitsRows, r, next_start + n, next_limit);
  if (m > 0 && batch_start + m > batch_limit)
    report(st, kGetLogitsDraftRows, r, batch_start + m, batch_limit);
}

// Apply, part 1: request b's counts and offsets entry b + 1 (`next_end` /
// `batch_end`: the inclusive prefix sums through b).
FD_HOST_DEVICE inline void get_logits_counts(const GetLogitsParams& p, int64_t b, int64_t next_end,
                                             int64_t batch_end) {
  p.next_token_num[b] = static_cast<int32_t>(get_logits_next_count(p, b));
  p.batch_token_num[b] = static_cast<int32_t>(get_logits_batch_count(p, b));
  p.cu_next_token_offset[b + 1] = static_cast<int32_t>(next_end);
  p.cu_batch_token_offset[b + 1] = static_cast<int32_t>(batch_end);
}

// Apply, part 2 (after part 1 for every request), from the offsets part 1
// wrote: the source of written row `row` (< batch(b)) of request b, and the
// destination row. A prefill's row 0 is first_token_logits[b], its row 1
// logits[cu_next[b]]; a decode's row r is logits[cu_next[b] + r].
FD_HOST_DEVICE inline const float* get_logits_source_row(const GetLogitsParams& p, int64_t b,
                                                         int64_t row) {
  const int64_t next_start = p.cu_next_token_offset[b];
  if (p.seq_lens_encoder[b] > 0)
    return row == 0 ? p.first_token_logits + b * p.vocab : p.logits + next_start * p.vocab;
  return p.logits + (next_start + row) * p.vocab;
}

FD_HOST_DEVICE inline float* get_logits_dest_row(const GetLogitsParams& p, int64_t b, int64_t row) {
  return p.draft_logits + (static_cast<int64_t>(p.cu_batch_token_offset[b]) + row) * p.vocab;
}

inline KernelStatus get_logits_cpu(const GetLogitsParams& p) {
  KernelStatus st{};
  get_logits_check_batch(p, &st);
  if (st.code != 0) return st;
  int64_t next_sum = 0, batch_sum = 0;
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) {
    const int64_t ns = b == 0 ? p.cu_next_token_offset[0] : next_sum;
    const int64_t bs = b == 0 ? p.cu_batch_token_offset[0] : batch_sum;
    get_logits_check(p, b, ns, bs, &st);
    next_sum += get_logits_next_count(p, b);
    batch_sum += get_logits_batch_count(p, b);
  }
  if (st.code != 0) return st;
  next_sum = batch_sum = 0;
  for (int64_t b = 0; b < p.bsz; ++b) {
    next_sum += get_logits_next_count(p, b);
    batch_sum += get_logits_batch_count(p, b);
    get_logits_counts(p, b, next_sum, batch_sum);
  }
  for (int64_t b = 0; b < p.bsz; ++b) {  // whole rows (the CPU copies a row at a time)
    const int64_t rows = get_logits_batch_count(p, b);
    for (int64_t r = 0; r < rows; ++r) {
      const float* src = get_logits_source_row(p, b, r);
      std::copy(src, src + p.vocab, get_logits_dest_row(p, b, r));
    }
  }
  return st;
}

}  // namespace fd_mtp
