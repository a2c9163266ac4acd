// speculate_insert_first_token (spec §5.18, docs/spec/logprobs.md): writes the
// token ids matching speculate_get_logits' rows. Request b writes at
// token_ids[cu_batch_token_offset[b] ...]: a prefill request
// (seq_lens_encoder != 0) the target's first token accept_tokens[b, 0] then
// next_tokens[cu_next_token_offset[b]]; a decode request its
// seq_lens_this_time next tokens (none when <= 0).
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum InsertFirstTokenStatus : int32_t {
  kInsertTokenIds = 1,    // positions past token_ids
  kInsertNextTokens = 2,  // positions past next_tokens
  kInsertBatchStart = 3,  // cu_batch_token_offset[b] < 0
  kInsertNextStart = 4,   // cu_next_token_offset[b] < 0
};

struct InsertFirstTokenParams {
  int64_t* token_ids;                    // [token_ids_len], written
  const int64_t* accept_tokens;          // [>=bsz, accept_cols]
  const int64_t* next_tokens;            // [next_tokens_len]
  const int32_t* cu_next_token_offset;   // [>=bsz]
  const int32_t* cu_batch_token_offset;  // [>=bsz]
  const int32_t* seq_lens_this_time;     // [bsz]
  const int32_t* seq_lens_encoder;       // [>=bsz]
  int64_t bsz;
  int64_t accept_cols;
  int64_t token_ids_len;
  int64_t next_tokens_len;
};

FD_HOST_DEVICE inline bool insert_is_prefill(const InsertFirstTokenParams& p, int64_t b) {
  return p.seq_lens_encoder[b] != 0;
}

// Entries of token_ids request b writes; of next_tokens it reads.
FD_HOST_DEVICE inline int64_t insert_written(const InsertFirstTokenParams& p, int64_t b) {
  if (insert_is_prefill(p, b)) return 2;
  return p.seq_lens_this_time[b] > 0 ? p.seq_lens_this_time[b] : 0;
}

FD_HOST_DEVICE inline int64_t insert_read(const InsertFirstTokenParams& p, int64_t b) {
  return insert_is_prefill(p, b) ? 1 : insert_written(p, b);
}

FD_HOST_DEVICE inline void insert_first_token_check(const InsertFirstTokenParams& p, int64_t b,
                                                    KernelStatus* st) {
  const int32_t r = static_cast<int32_t>(b);
  const int64_t w = insert_written(p, b);
  if (w == 0) return;
  const int64_t dst = p.cu_batch_token_offset[b];
  const int64_t src = p.cu_next_token_offset[b];
  if (dst < 0) report(st, kInsertBatchStart, r, dst, 0);
  if (src < 0) report(st, kInsertNextStart, r, src, 0);
  if (dst + w > p.token_ids_len) report(st, kInsertTokenIds, r, dst + w, p.token_ids_len);
  const int64_t n = insert_read(p, b);
  if (src + n > p.next_tokens_len) report(st, kInsertNextTokens, r, src + n, p.next_tokens_len);
}

// Writes entry i (< insert_written) of request b.
FD_HOST_DEVICE inline void insert_first_token_entry(const InsertFirstTokenParams& p, int64_t b,
                                                    int64_t i) {
  const int64_t dst = p.cu_batch_token_offset[b];
  const int64_t src = p.cu_next_token_offset[b];
  if (insert_is_prefill(p, b)) {
    p.token_ids[dst + i] = i == 0 ? p.accept_tokens[b * p.accept_cols] : p.next_tokens[src];
  } else {
    p.token_ids[dst + i] = p.next_tokens[src + i];
  }
}

inline KernelStatus insert_first_token_cpu(const InsertFirstTokenParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) insert_first_token_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bsz; ++b) {
    const int64_t w = insert_written(p, b);
    for (int64_t i = 0; i < w; ++i) insert_first_token_entry(p, b, i);
  }
  return st;
}

}  // namespace fd_mtp
