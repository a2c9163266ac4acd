// paged_attention: the CPU / CUDA kernel of fd_mtp.model's paged KV-cache
// attention (one packed, variable-length batch; spec §1.3, FastDeploy's cache
// layout).
//
// Token t belongs to request b = batch_id_per_token[t] and is its local token
// i = t - cu_seqlens_q[b]; its position is pos = seq_lens_decoder[b] + i.
// Position p of request b lives in cache block block_tables[b, p / block_size]
// at offset p % block_size; a cache is [num_blocks, Hkv, block_size, D].
//
// Two passes: (1) every token's new k/v rows [Hkv, D] are written into its
// slot; (2) for every (token, q head h): causal attention over positions
// 0 .. pos of its request read from the cache, kv head h / (Hq / Hkv),
// scores q.k * scale, softmax in float32 (online: running max and sum),
// out[t, h * D .. h * D + D) = sum_p softmax_p * v_p.
//
// A check pass first validates every token (request id, local index, every
// block-table entry its context needs), so bad input writes nothing. float32
// only (the model refuses half precision on the CPU).
#pragma once

#include <cmath>
#include <cstring>

#include "common.h"

namespace fd_mtp {

enum PagedAttentionStatus : int32_t {
  kPagedBatchId = 1,     // batch_id_per_token[t] outside [0, bsz)
  kPagedTokenIndex = 2,  // token t outside its request's [cu_seqlens_q[b], cu_seqlens_q[b+1])
  kPagedDecoder = 3,     // seq_lens_decoder[b] < 0
  kPagedTableWidth = 4,  // a needed position's block column is beyond the table width
  kPagedBlockId = 5,     // a needed block id outside [0, num_blocks)
};

struct PagedAttentionParams {
  const float* q;                     // [T, Hq, D]
  const float* k;                     // [T, Hkv, D]
  const float* v;                     // [T, Hkv, D]
  float* key_cache;                   // [num_blocks, Hkv, block_size, D], written
  float* value_cache;                 // [num_blocks, Hkv, block_size, D], written
  const int32_t* block_tables;        // [>= bsz, table_width]
  const int32_t* cu_seqlens_q;        // [bsz + 1]
  const int32_t* batch_id_per_token;  // [>= T]
  const int32_t* seq_lens_decoder;    // [>= bsz]
  int64_t num_tokens;                 // T
  int64_t bsz;
  int64_t q_heads;   // Hq
  int64_t kv_heads;  // Hkv (divides Hq)
  int64_t head_dim;  // D
  int64_t num_blocks;
  int64_t block_size;
  int64_t table_width;  // NB
  float scale;
  float* out;  // [T, Hq * D], written
};

// Request and position of token t (valid only after the check passed).
struct PagedToken {
  int64_t request;
  int64_t pos;
};

FD_HOST_DEVICE inline PagedToken paged_attention_token(const PagedAttentionParams& p, int64_t t) {
  const int64_t b = p.batch_id_per_token[t];
  return PagedToken{b, static_cast<int64_t>(p.seq_lens_decoder[b]) + t - p.cu_seqlens_q[b]};
}

// Validates token t: its request, its local index and every block-table entry
// of positions 0 .. pos (the columns 0 .. pos / block_size).
FD_HOST_DEVICE inline void paged_attention_check(const PagedAttentionParams& p, int64_t t,
                                                 KernelStatus* st) {
  const int64_t b = p.batch_id_per_token[t];
  if (!in_range(b, p.bsz)) {
    report(st, kPagedBatchId, -1, b, p.bsz);
    return;
  }
  const int32_t rb = static_cast<int32_t>(b);
  if (t < p.cu_seqlens_q[b] || t >= p.cu_seqlens_q[b + 1]) {
    report(st, kPagedTokenIndex, rb, t, p.cu_seqlens_q[b + 1]);
    return;
  }
  if (p.seq_lens_decoder[b] < 0) {
    report(st, kPagedDecoder, rb, p.seq_lens_decoder[b], 0);
    return;
  }
  const int64_t pos = paged_attention_token(p, t).pos;
  const int64_t last_col = pos / p.block_size;
  if (last_col >= p.table_width) {
    report(st, kPagedTableWidth, rb, pos, p.table_width * p.block_size);
    return;
  }
  const int32_t* row = p.block_tables + b * p.table_width;
  for (int64_t c = 0; c <= last_col; ++c) {
    if (!in_range(row[c], p.num_blocks)) {
      report(st, kPagedBlockId, rb, row[c], p.num_blocks);
      return;
    }
  }
}

// Pass 1: the cache offset of token t's row of kv head g (its slot).
FD_HOST_DEVICE inline int64_t paged_attention_slot(const PagedAttentionParams& p, int64_t t,
                                                   int64_t g) {
  const PagedToken tk = paged_attention_token(p, t);
  const int64_t block = p.block_tables[tk.request * p.table_width + tk.pos / p.block_size];
  return ((block * p.kv_heads + g) * p.block_size + tk.pos % p.block_size) * p.head_dim;
}

// Pass 1 for token t, kv head g: copy its k/v row into its cache slot.
FD_HOST_DEVICE inline void paged_attention_write(const PagedAttentionParams& p, int64_t t,
                                                 int64_t g) {
  const int64_t slot = paged_attention_slot(p, t, g);
  const int64_t src = (t * p.kv_heads + g) * p.head_dim;
  for (int64_t d = 0; d < p.head_dim; ++d) {
    p.key_cache[slot + d] = p.k[src + d];
    p.value_cache[slot + d] = p.v[src + d];
  }
}

// The cache offset of position pos of request b, kv head g (pass 2's rows).
FD_HOST_DEVICE inline int64_t paged_attention_position(const PagedAttentionParams& p, int64_t b,
                                                       int64_t g, int64_t pos) {
  const int64_t block = p.block_tables[b * p.table_width + pos / p.block_size];
  return ((block * p.kv_heads + g) * p.block_size + pos % p.block_size) * p.head_dim;
}

FD_HOST_DEVICE inline float paged_dot(const float* a, const float* b, int64_t n) {
  // four partial sums: lets the compiler vectorise without -ffast-math
  float s0 = 0.f, s1 = 0.f, s2 = 0.f, s3 = 0.f;
  int64_t d = 0;
  for (; d + 4 <= n; d += 4) {
    s0 += a[d] * b[d];
    s1 += a[d + 1] * b[d + 1];
    s2 += a[d + 2] * b[d + 2];
    s3 += a[d + 3] * b[d + 3];
  }
  for (; d < n; ++d) s0 += a[d] * b[d];
  return (s0 + s1) + (s2 + s3);
}

// Positions scored at a time in pass 2: one max / rescale per chunk instead of
// per position (a fixed size, so it is a register array on the GPU too).
constexpr int kPagedChunk = 16;

// Pass 2 for token t, q head h: online-softmax attention over positions
// 0 .. pos of its request, accumulated directly in the output row
// out[t, h*D .. h*D + D) (float32). Positions are taken in chunks of at most
// kPagedChunk within a block: scores of the chunk, then one rescale of the
// running sum and accumulator when the chunk raises the running max.
FD_HOST_DEVICE inline void paged_attention_token_head(const PagedAttentionParams& p, int64_t t,
                                                      int64_t h) {
  const PagedToken tk = paged_attention_token(p, t);
  const int64_t dim = p.head_dim;
  const int64_t g = h / (p.q_heads / p.kv_heads);
  const float* qrow = p.q + (t * p.q_heads + h) * dim;
  float* __restrict__ o = p.out + (t * p.q_heads + h) * dim;
  for (int64_t d = 0; d < dim; ++d) o[d] = 0.f;
  const int32_t* row = p.block_tables + tk.request * p.table_width;
  const int64_t ctx = tk.pos + 1;
  float m = -INFINITY, l = 0.f;
  float s[kPagedChunk];
  for (int64_t c = 0; c * p.block_size < ctx; ++c) {
    const int64_t base = (static_cast<int64_t>(row[c]) * p.kv_heads + g) * p.block_size;
    const int64_t n = ctx - c * p.block_size < p.block_size ? ctx - c * p.block_size : p.block_size;
    for (int64_t j0 = 0; j0 < n; j0 += kPagedChunk) {
      const int64_t cn = n - j0 < kPagedChunk ? n - j0 : kPagedChunk;
      float cmax = -INFINITY;
      for (int64_t j = 0; j < cn; ++j) {
        s[j] = paged_dot(qrow, p.key_cache + (base + j0 + j) * dim, dim) * p.scale;
        cmax = s[j] > cmax ? s[j] : cmax;
      }
      if (cmax > m) {  // new running max: rescale what was accumulated (exp(-inf) = 0 at the start)
        const float corr = expf(m - cmax);
        l *= corr;
        for (int64_t d = 0; d < dim; ++d) o[d] *= corr;
        m = cmax;
      }
      for (int64_t j = 0; j < cn; ++j) {
        const float w = expf(s[j] - m);
        const float* __restrict__ vrow = p.value_cache + (base + j0 + j) * dim;
        l += w;
        for (int64_t d = 0; d < dim; ++d) o[d] += w * vrow[d];
      }
    }
  }
  const float inv = 1.f / l;  // l >= 1: the max position contributes exp(0)
  for (int64_t d = 0; d < dim; ++d) o[d] *= inv;
}

inline KernelStatus paged_attention_cpu(const PagedAttentionParams& p) {
  KernelStatus st{};
  for (int64_t t = 0; t < p.num_tokens && st.code == 0; ++t) paged_attention_check(p, t, &st);
  if (st.code != 0) return st;
  for (int64_t t = 0; t < p.num_tokens; ++t)
    for (int64_t g = 0; g < p.kv_heads; ++g) paged_attention_write(p, t, g);
  for (int64_t t = 0; t < p.num_tokens; ++t)
    for (int64_t h = 0; h < p.q_heads; ++h) paged_attention_token_head(p, t, h);
  return st;
}

}  // namespace fd_mtp
