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
//   attn = paged attention of q over the cache after writing k, v (the
//          checks, slots and chunked online softmax of paged_attention.h,
//          vectorised here: decoder_attention below)
//   res  = attn . o_weight + res                   -> residual_out
//   x    = rms_norm(res) * post_norm_weight
//   out  = (silu(x . gate_weight) * (x . up_weight)) . down_weight
//
// rms_norm(r) = r * (1 / sqrt(mean(r^2) + eps)), the mean of squares summed in
// double. Matrix products: cpu_gemm.h (one fma chain per element); the
// attention's dot products, its axpys, exp and SwiGLU have an AVX2 form and a
// portable form with the same operations in the same order (explicit fmas, exp
// from decoder_exp, not libm), so the layer returns the same bits on every
// x86-64 CPU. The check pass (paged_attention_check for every
// token) runs first, so bad metadata writes nothing (neither the caches nor an output).
//
// The first layer of a forward passes a zero residual (hidden + 0 = hidden).
// float32 only; CPU only (the GPU forward is fd_mtp.cuda's).
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#include "common.h"
#include "cpu_gemm.h"
#include "cpu_parallel.h"
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
  bool avx2;                // the CPU has AVX2 + FMA (cpu_gemm::cpu_has_avx2_fma()): speed only
  const ParallelFor* pool;  // the threads to split the work over (nullptr: this one): speed only
  float* workspace;         // decoder_layer_workspace_floats(...) floats
  float* out;               // [T, H], written
  float* residual_out;      // [T, H], written
};

// Floats of scratch one call needs: x and x2 [T, H], q and attn [T, Hq D], k
// and v [T, Hkv D], gate and up [T, I].
inline int64_t decoder_layer_workspace_floats(int64_t tokens, int64_t hidden, int64_t q_heads,
                                              int64_t kv_heads, int64_t head_dim,
                                              int64_t intermediate) {
  return tokens *
         (2 * hidden + 2 * q_heads * head_dim + 2 * kv_heads * head_dim + 2 * intermediate);
}

// exp(x) in float32 to about 2 ulp (Cephes' expf: x = n ln2 + r, |r| <= ln2 / 2,
// a degree-6 polynomial, then 2^n), written so that decoder_exp8 below computes
// the same bits in AVX2 lanes. x is clamped to [-87.3, 88.7] (exp(-inf) is about
// 1e-38, not 0); NaN stays NaN.
__attribute__((always_inline)) inline float decoder_exp_body(float x) {
  x = -87.3f > x ? -87.3f : x;
  x = 88.7f < x ? 88.7f : x;
  const float n = std::floor(std::fma(x, 1.44269504088896341f, 0.5f));
  float r = std::fma(n, -0.693359375f, x);
  r = std::fma(n, 2.12194440e-4f, r);
  float y = 1.9875691500e-4f;
  y = std::fma(y, r, 1.3981999507e-3f);
  y = std::fma(y, r, 8.3334519073e-3f);
  y = std::fma(y, r, 4.1665795894e-2f);
  y = std::fma(y, r, 1.6666665459e-1f);
  y = std::fma(y, r, 5.0000001201e-1f);
  y = std::fma(y, r * r, r) + 1.f;
  const int32_t bits = ((n == n ? static_cast<int32_t>(n) : 0) + 127) << 23;
  float scale;
  std::memcpy(&scale, &bits, sizeof(scale));
  return y * scale;
}

inline float decoder_exp(float x) { return decoder_exp_body(x); }

// a . b over n floats: 8 lanes of fma chains (lane d % 8), summed pairwise.
inline float decoder_dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    for (int j = 0; j < 8; ++j) acc[j] = std::fma(a[d + j], b[d + j], acc[j]);
  for (int j = 0; d + j < n; ++j) acc[j] = std::fma(a[d + j], b[d + j], acc[j]);
  return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}

#if FD_MTP_GEMM_X86
// decoder_dot with the 8 lanes in one register (the same bits).
__attribute__((target("avx2,fma"))) inline float decoder_dot_avx2(const float* a, const float* b,
                                                                  int64_t n) {
  __m256 acc = _mm256_setzero_ps();
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    acc = _mm256_fmadd_ps(_mm256_loadu_ps(a + d), _mm256_loadu_ps(b + d), acc);
  float l[8];
  _mm256_storeu_ps(l, acc);
  for (int j = 0; d + j < n; ++j) l[j] = std::fma(a[d + j], b[d + j], l[j]);
  return ((l[0] + l[1]) + (l[2] + l[3])) + ((l[4] + l[5]) + (l[6] + l[7]));
}

// o[d] = fma(w, v[d], o[d]) over n floats.
__attribute__((target("avx2,fma"))) inline void decoder_axpy_avx2(float w, const float* v, float* o,
                                                                  int64_t n) {
  const __m256 wv = _mm256_set1_ps(w);
  int64_t d = 0;
  for (; d + 8 <= n; d += 8)
    _mm256_storeu_ps(o + d, _mm256_fmadd_ps(wv, _mm256_loadu_ps(v + d), _mm256_loadu_ps(o + d)));
  for (; d < n; ++d) o[d] = std::fma(w, v[d], o[d]);
}

// decoder_exp on 8 lanes (the same operations, so the same bits).
__attribute__((target("avx2,fma"))) inline __m256 decoder_exp8(__m256 x) {
  x = _mm256_max_ps(_mm256_set1_ps(-87.3f), x);  // NaN in x: x (max returns its 2nd operand)
  x = _mm256_min_ps(_mm256_set1_ps(88.7f), x);
  const __m256 n = _mm256_floor_ps(
      _mm256_fmadd_ps(x, _mm256_set1_ps(1.44269504088896341f), _mm256_set1_ps(0.5f)));
  __m256 r = _mm256_fmadd_ps(n, _mm256_set1_ps(-0.693359375f), x);
  r = _mm256_fmadd_ps(n, _mm256_set1_ps(2.12194440e-4f), r);
  __m256 y = _mm256_set1_ps(1.9875691500e-4f);
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.3981999507e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(8.3334519073e-3f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(4.1665795894e-2f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(1.6666665459e-1f));
  y = _mm256_fmadd_ps(y, r, _mm256_set1_ps(5.0000001201e-1f));
  y = _mm256_add_ps(_mm256_fmadd_ps(y, _mm256_mul_ps(r, r), r), _mm256_set1_ps(1.f));
  const __m256i bits =
      _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvttps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_mul_ps(y, _mm256_castsi256_ps(bits));
}

__attribute__((target("avx2,fma"))) inline void decoder_swiglu_avx2(float* gate, const float* up,
                                                                    int64_t n) {
  const __m256 one = _mm256_set1_ps(1.f), sign = _mm256_set1_ps(-0.f);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const __m256 g = _mm256_loadu_ps(gate + i);
    const __m256 e = decoder_exp8(_mm256_xor_ps(g, sign));
    _mm256_storeu_ps(
        gate + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(one, e)), _mm256_loadu_ps(up + i)));
  }
  for (; i < n; ++i) gate[i] = gate[i] / (1.f + decoder_exp_body(-gate[i])) * up[i];
}
#endif

// gate[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up, over n floats.
inline void decoder_swiglu(float* gate, const float* up, int64_t n, bool avx2) {
#if FD_MTP_GEMM_X86
  if (avx2) return decoder_swiglu_avx2(gate, up, n);
#endif
  for (int64_t i = 0; i < n; ++i) gate[i] = gate[i] / (1.f + decoder_exp(-gate[i])) * up[i];
}

// Attention of token t, q head h: paged_attention_token_head's chunked online
// softmax over positions 0 .. pos, with decoder_dot, decoder_exp and fmas.
template <bool kAvx2>
__attribute__((always_inline)) inline void decoder_attention_body(const PagedAttentionParams& p,
                                                                  int64_t t, int64_t h) {
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
        const float* krow = p.key_cache + (base + j0 + j) * dim;
#if FD_MTP_GEMM_X86
        if constexpr (kAvx2) {
          s[j] = decoder_dot_avx2(qrow, krow, dim) * p.scale;
        } else {
          s[j] = decoder_dot(qrow, krow, dim) * p.scale;
        }
#else
        s[j] = decoder_dot(qrow, krow, dim) * p.scale;
#endif
        cmax = s[j] > cmax ? s[j] : cmax;
      }
      if (cmax > m) {  // a new running max: rescale what was accumulated
        const float corr = m == -INFINITY ? 0.f : decoder_exp_body(m - cmax);
        l *= corr;
        for (int64_t d = 0; d < dim; ++d) o[d] *= corr;
        m = cmax;
      }
      for (int64_t j = 0; j < cn; ++j) {
        const float w = decoder_exp_body(s[j] - m);
        const float* __restrict__ vrow = p.value_cache + (base + j0 + j) * dim;
        l += w;
#if FD_MTP_GEMM_X86
        if constexpr (kAvx2) {
          decoder_axpy_avx2(w, vrow, o, dim);
          continue;
        }
#endif
        for (int64_t d = 0; d < dim; ++d) o[d] = std::fma(w, vrow[d], o[d]);
      }
    }
  }
  const float inv = 1.f / l;  // l >= 1: the max position contributes exp(0)
  for (int64_t d = 0; d < dim; ++d) o[d] *= inv;
}

inline void decoder_attention_portable(const PagedAttentionParams& p, int64_t t, int64_t h) {
  decoder_attention_body<false>(p, t, h);
}

#if FD_MTP_GEMM_X86
__attribute__((target("avx2,fma"))) inline void decoder_attention_avx2(
    const PagedAttentionParams& p, int64_t t, int64_t h) {
  decoder_attention_body<true>(p, t, h);
}
#endif

// Attention of token t, q head h (the AVX2 or the portable form: the same bits).
inline void decoder_attention(const PagedAttentionParams& p, int64_t t, int64_t h, bool avx2) {
#if FD_MTP_GEMM_X86
  if (avx2) return decoder_attention_avx2(p, t, h);
#endif
  (void)avx2;
  decoder_attention_portable(p, t, h);
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

// Columns of a matrix-product task: a multiple of the one-row tile's width (64). Every
// element's fma chain is the same whichever task computes it.
constexpr int64_t kColumnsPerTask = 64;

// y[M, N] = x[M, K] . w[K, N] split by columns over the pool (the same bits for any split).
inline void decoder_gemm(const DecoderLayerParams& p, const float* x, const float* w, float* y,
                         int64_t M, int64_t K, int64_t N) {
  const int64_t threads = p.pool == nullptr ? 1 : p.pool->threads();
  const int64_t chunks = (N + kColumnsPerTask - 1) / kColumnsPerTask;
  const int64_t tasks = chunks < threads ? chunks : threads;
  parallel_for(p.pool, tasks, [&](int64_t i) {
    const int64_t n0 = chunks * i / tasks * kColumnsPerTask;
    const int64_t n1 = chunks * (i + 1) / tasks * kColumnsPerTask;
    cpu_gemm::gemm(x, K, w, N, y, N, M, K, n0, n1 < N ? n1 : N, p.avx2);
  });
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
  decoder_gemm(p, x, p.q_weight, q, T, H, qd);
  decoder_gemm(p, x, p.k_weight, k, T, H, kd);
  decoder_gemm(p, x, p.v_weight, v, T, H, kd);
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
  parallel_for(p.pool, T * p.q_heads,
               [&](int64_t i) { decoder_attention(ap, i / p.q_heads, i % p.q_heads, p.avx2); });
  float* o = x;  // x is free again: the o_proj output
  decoder_gemm(p, attn, p.o_weight, o, T, qd, H);

  // MLP block
  for (int64_t t = 0; t < T; ++t)
    decoder_add_rms_norm(o + t * H, res + t * H, res + t * H, p.post_norm_weight, p.eps, H,
                         x2 + t * H);
  decoder_gemm(p, x2, p.gate_weight, gate, T, H, I);
  decoder_gemm(p, x2, p.up_weight, up, T, H, I);
  decoder_swiglu(gate, up, T * I, p.avx2);
  decoder_gemm(p, gate, p.down_weight, p.out, T, I, H);
  return st;
}

}  // namespace fd_mtp
