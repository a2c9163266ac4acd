// decoder_layer: one ERNIE-4.5 dense decoder layer of fd_mtp.model on the CPU,
// float32, for one packed, variable-length batch (the native forward,
// fd_mtp/model/native.py). With the residual carried beside the hidden state
// (FastDeploy's layer structure):
//
//   res  = hidden + residual                       -> residual_out (first pass)
//   x    = rms_norm(res) * input_norm_weight
//   q, k, v = x . q_weight, x . k_weight, x . v_weight        (no bias)
//   q, k = interleaved RoPE: the pair (a, b) = (x[2i], x[2i+1]) of every head
//          becomes (a cos - b sin, b cos + a sin), cos / sin = rope_cos[t, i],
//          rope_sin[t, i] (the model's tables, fd_mtp.model.attention.rope_tables)
//   attn = paged attention of q over the cache after writing k, v
//          (paged_attention.h, the same per-token functions)
//   res  = attn . o_weight + res                   -> residual_out
//   x    = rms_norm(res) * post_norm_weight
//   out  = (silu(x . gate_weight) * (x . up_weight)) . down_weight
//
// rms_norm(r) = r * (1 / sqrt(mean(r^2) + eps)), the mean of squares summed in
// double. Matrix products: cpu_gemm.h (one fma chain per element, the same bits
// on every x86-64 CPU). The check pass (paged_attention_check for every token)
// runs first, so bad metadata writes nothing (neither the caches nor an output).
//
// The first layer of a forward passes a zero residual (hidden + 0 = hidden).
// float32 only; CPU only (the GPU forward is fd_mtp.cuda's).
#pragma once

#include <cmath>
#include <cstdint>

#include "common.h"
#include "cpu_gemm.h"
#include "paged_attention.h"

namespace fd_mtp {

struct DecoderLayerParams {
  const float* hidden;                // [T, H]
  const float* residual;              // [T, H]
  const float* input_norm_weight;     // [H]
  const float* q_weight;              // [H, Hq * D]
  const float* k_weight;              // [H, Hkv * D]
  const float* v_weight;              // [H, Hkv * D]
  const float* o_weight;              // [Hq * D, H]
  const float* post_norm_weight;      // [H]
  const float* gate_weight;           // [H, I]
  const float* up_weight;             // [H, I]
  const float* down_weight;           // [I, H]
  float* key_cache;                   // [num_blocks, Hkv, block_size, D], written
  float* value_cache;                 // [num_blocks, Hkv, block_size, D], written
  const int32_t* block_tables;        // [>= bsz, table_width]
  const int32_t* cu_seqlens_q;        // [bsz + 1]
  const int32_t* batch_id_per_token;  // [>= T]
  const int32_t* seq_lens_decoder;    // [>= bsz]
  const float* rope_cos;              // [T, D / 2]
  const float* rope_sin;              // [T, D / 2]
  int64_t num_tokens;                 // T
  int64_t bsz;
  int64_t hidden_size;        // H
  int64_t q_heads;            // Hq
  int64_t kv_heads;           // Hkv (divides Hq)
  int64_t head_dim;           // D (even)
  int64_t intermediate_size;  // I
  int64_t num_blocks;
  int64_t block_size;
  int64_t table_width;
  float eps;
  float scale;
  bool avx2;            // the CPU has AVX2 + FMA (cpu_gemm::cpu_has_avx2_fma()): speed only
  float* workspace;     // decoder_layer_workspace_floats(...) floats
  float* out;           // [T, H], written
  float* residual_out;  // [T, H], written
};

// Floats of scratch one call needs: x and x2 [T, H], q and attn [T, Hq D], k
// and v [T, Hkv D], gate and up [T, I].
inline int64_t decoder_layer_workspace_floats(int64_t tokens, int64_t hidden, int64_t q_heads,
                                              int64_t kv_heads, int64_t head_dim,
                                              int64_t intermediate) {
  return tokens *
         (2 * hidden + 2 * q_heads * head_dim + 2 * kv_heads * head_dim + 2 * intermediate);
}

// y[r] = (a[r] + b[r]) -> sum, then y = sum * rsqrt(mean(sum^2) + eps) * w, one row of n.
// sum may alias a (in place); y must not alias sum.
inline void decoder_add_rms_norm(const float* a, const float* b, float* sum, const float* w,
                                 float eps, int64_t n, float* y) {
  double ss = 0.0;
  for (int64_t i = 0; i < n; ++i) {
    const float s = a[i] + b[i];
    sum[i] = s;
    ss += static_cast<double>(s) * s;
  }
  const float inv = 1.f / std::sqrt(static_cast<float>(ss / static_cast<double>(n)) + eps);
  for (int64_t i = 0; i < n; ++i) y[i] = sum[i] * inv * w[i];
}

// Interleaved RoPE of the `heads` heads of one token's row (in place).
inline void decoder_rope(float* row, int64_t heads, int64_t head_dim, const float* cos,
                         const float* sin) {
  const int64_t half = head_dim / 2;
  for (int64_t h = 0; h < heads; ++h) {
    float* x = row + h * head_dim;
    for (int64_t i = 0; i < half; ++i) {
      const float a = x[2 * i], b = x[2 * i + 1], c = cos[i], s = sin[i];
      x[2 * i] = a * c - b * s;
      x[2 * i + 1] = b * c + a * s;
    }
  }
}

inline KernelStatus decoder_layer_cpu(const DecoderLayerParams& p) {
  const int64_t T = p.num_tokens, H = p.hidden_size, D = p.head_dim, I = p.intermediate_size;
  const int64_t qd = p.q_heads * D, kd = p.kv_heads * D;
  PagedAttentionParams ap{};
  ap.key_cache = p.key_cache;
  ap.value_cache = p.value_cache;
  ap.block_tables = p.block_tables;
  ap.cu_seqlens_q = p.cu_seqlens_q;
  ap.batch_id_per_token = p.batch_id_per_token;
  ap.seq_lens_decoder = p.seq_lens_decoder;
  ap.num_tokens = T;
  ap.bsz = p.bsz;
  ap.q_heads = p.q_heads;
  ap.kv_heads = p.kv_heads;
  ap.head_dim = D;
  ap.num_blocks = p.num_blocks;
  ap.block_size = p.block_size;
  ap.table_width = p.table_width;
  ap.scale = p.scale;
  KernelStatus st{};
  for (int64_t t = 0; t < T && st.code == 0; ++t) paged_attention_check(ap, t, &st);
  if (st.code != 0 || T == 0) return st;

  float* x = p.workspace;       // [T, H]
  float* q = x + T * H;         // [T, qd]
  float* k = q + T * qd;        // [T, kd]
  float* v = k + T * kd;        // [T, kd]
  float* attn = v + T * kd;     // [T, qd]
  float* gate = attn + T * qd;  // [T, I]
  float* up = gate + T * I;     // [T, I]
  float* x2 = up + T * I;       // [T, H]
  float* res = p.residual_out;

  // attention block
  for (int64_t t = 0; t < T; ++t)
    decoder_add_rms_norm(p.hidden + t * H, p.residual + t * H, res + t * H, p.input_norm_weight,
                         p.eps, H, x + t * H);
  cpu_gemm::gemm(x, H, p.q_weight, qd, q, qd, T, H, 0, qd, p.avx2);
  cpu_gemm::gemm(x, H, p.k_weight, kd, k, kd, T, H, 0, kd, p.avx2);
  cpu_gemm::gemm(x, H, p.v_weight, kd, v, kd, T, H, 0, kd, p.avx2);
  for (int64_t t = 0; t < T; ++t) {
    const float* cos = p.rope_cos + t * (D / 2);
    const float* sin = p.rope_sin + t * (D / 2);
    decoder_rope(q + t * qd, p.q_heads, D, cos, sin);
    decoder_rope(k + t * kd, p.kv_heads, D, cos, sin);
  }
  ap.q = q;
  ap.k = k;
  ap.v = v;
  ap.out = attn;
  for (int64_t t = 0; t < T; ++t)
    for (int64_t g = 0; g < p.kv_heads; ++g) paged_attention_write(ap, t, g);
  for (int64_t t = 0; t < T; ++t)
    for (int64_t h = 0; h < p.q_heads; ++h) paged_attention_token_head(ap, t, h);
  float* o = x;  // x is free again: the o_proj output
  cpu_gemm::gemm(attn, qd, p.o_weight, H, o, H, T, qd, 0, H, p.avx2);

  // MLP block
  for (int64_t t = 0; t < T; ++t)
    decoder_add_rms_norm(o + t * H, res + t * H, res + t * H, p.post_norm_weight, p.eps, H,
                         x2 + t * H);
  cpu_gemm::gemm(x2, H, p.gate_weight, I, gate, I, T, H, 0, I, p.avx2);
  cpu_gemm::gemm(x2, H, p.up_weight, I, up, I, T, H, 0, I, p.avx2);
  for (int64_t i = 0; i < T * I; ++i) {
    const float g = gate[i];
    gate[i] = g / (1.f + std::exp(-g)) * up[i];
  }
  cpu_gemm::gemm(gate, I, p.down_weight, H, p.out, H, T, I, 0, H, p.avx2);
  return st;
}

}  // namespace fd_mtp
