// cpu_gemm: the float32 matrix products of the CPU decoder layer (decoder_layer.h),
// y[M, N] = x[M, K] . w[K, N] with row-major operands (Paddle's Linear layout,
// weights [in, out]).
//
// Every output element is one chain of fused multiply-adds over k = 0 .. K-1 in
// order, starting from 0: y = fma(x[m, k], w[k, n], y). The AVX2 path and the
// portable path (std::fma) therefore return the same bits on every x86-64 CPU;
// which one runs depends only on the CPU's features (AVX2 + FMA), which the
// caller reads and passes in.
//
// Tiling only decides which elements are computed together. w is read in
// panels of consecutive rows (k), left to right; every group of up to 6 rows
// of x runs over a strip of the panel while it is in L1 / L2, accumulating
// R x NV vectors of 8 columns in registers (loaded from y after the first
// panel). Decoding multiplies a few rows (M <= 8) by weights that stream from
// L3 or memory: short panels (16 rows: 16 sequential streams the prefetcher
// follows). More rows make the product compute-bound: long panels (256 rows),
// so y is loaded and stored K / 256 times, not K / 16.
#pragma once

#include <cmath>
#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <immintrin.h>
#define FD_MTP_GEMM_X86 1
#else
#define FD_MTP_GEMM_X86 0
#endif

namespace fd_mtp {
namespace cpu_gemm {

constexpr int64_t kKPanelFew = 16;    // rows of w per panel for M <= kFewRows
constexpr int64_t kKPanelMany = 256;  // and above
constexpr int64_t kFewRows = 8;

// The portable path over rows [0, M) and columns [n0, n1): the same fma chains.
inline void gemm_portable(const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
                          int64_t ldy, int64_t M, int64_t K, int64_t n0, int64_t n1) {
  for (int64_t m = 0; m < M; ++m) {
    float* yr = y + m * ldy;
    for (int64_t n = n0; n < n1; ++n) yr[n] = 0.f;
    const float* xr = x + m * ldx;
    for (int64_t k = 0; k < K; ++k) {
      const float a = xr[k];
      const float* wr = w + k * ldw;
      for (int64_t n = n0; n < n1; ++n) yr[n] = std::fma(a, wr[n], yr[n]);
    }
  }
}

#if FD_MTP_GEMM_X86
#define FD_MTP_GEMM_AVX2 __attribute__((target("avx2,fma"))) inline

// Accumulator c of row r, vector j: loaded from y (or 0 when the panel is the first).
#define FD_MTP_GEMM_LOAD(c, r, j) \
  __m256 c = k0 == 0 ? _mm256_setzero_ps() : _mm256_loadu_ps(y + (r) * ldy + 8 * (j))
#define FD_MTP_GEMM_STORE(c, r, j) _mm256_storeu_ps(y + (r) * ldy + 8 * (j), c)

// One row, 8 vectors (64 columns): rows [k0, k1) of the panel, on top of y.
// Named accumulators (not an array), so the compiler keeps all of them in registers.
FD_MTP_GEMM_AVX2 void gemm_tile_1x8(const float* x, const float* w, int64_t ldw, float* y,
                                    int64_t ldy, int64_t k0, int64_t k1) {
  FD_MTP_GEMM_LOAD(c0, 0, 0);
  FD_MTP_GEMM_LOAD(c1, 0, 1);
  FD_MTP_GEMM_LOAD(c2, 0, 2);
  FD_MTP_GEMM_LOAD(c3, 0, 3);
  FD_MTP_GEMM_LOAD(c4, 0, 4);
  FD_MTP_GEMM_LOAD(c5, 0, 5);
  FD_MTP_GEMM_LOAD(c6, 0, 6);
  FD_MTP_GEMM_LOAD(c7, 0, 7);
  for (int64_t k = k0; k < k1; ++k) {
    const float* wk = w + k * ldw;
    const __m256 a = _mm256_broadcast_ss(x + k);
    c0 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk), c0);
    c1 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk + 8), c1);
    c2 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk + 16), c2);
    c3 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk + 24), c3);
    c4 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk + 32), c4);
    c5 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk + 40), c5);
    c6 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk + 48), c6);
    c7 = _mm256_fmadd_ps(a, _mm256_loadu_ps(wk + 56), c7);
  }
  FD_MTP_GEMM_STORE(c0, 0, 0);
  FD_MTP_GEMM_STORE(c1, 0, 1);
  FD_MTP_GEMM_STORE(c2, 0, 2);
  FD_MTP_GEMM_STORE(c3, 0, 3);
  FD_MTP_GEMM_STORE(c4, 0, 4);
  FD_MTP_GEMM_STORE(c5, 0, 5);
  FD_MTP_GEMM_STORE(c6, 0, 6);
  FD_MTP_GEMM_STORE(c7, 0, 7);
}

// R <= 6 rows x NV <= 4 vectors (8 NV columns, R x NV <= 12 accumulators), the same panel
// contract. Accumulators are named variables (an array of vectors is kept in memory by GCC).
template <int R, int NV>
FD_MTP_GEMM_AVX2 void gemm_tile(const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
                                int64_t ldy, int64_t k0, int64_t k1) {
  static_assert(R >= 1 && R <= 6 && NV >= 1 && NV <= 4 && R * NV <= 12, "tile shape");
  const __m256 z = _mm256_setzero_ps();
  __m256 c00 = z, c01 = z, c02 = z, c03 = z;
  __m256 c10 = z, c11 = z, c12 = z, c13 = z;
  __m256 c20 = z, c21 = z, c22 = z, c23 = z;
  __m256 c30 = z, c31 = z, c32 = z, c33 = z;
  __m256 c40 = z, c41 = z, c42 = z, c43 = z;
  __m256 c50 = z, c51 = z, c52 = z, c53 = z;
  if (k0 != 0) {
    if constexpr (R > 0 && NV > 0) c00 = _mm256_loadu_ps(y + 0 * ldy + 0);
    if constexpr (R > 0 && NV > 1) c01 = _mm256_loadu_ps(y + 0 * ldy + 8);
    if constexpr (R > 0 && NV > 2) c02 = _mm256_loadu_ps(y + 0 * ldy + 16);
    if constexpr (R > 0 && NV > 3) c03 = _mm256_loadu_ps(y + 0 * ldy + 24);
    if constexpr (R > 1 && NV > 0) c10 = _mm256_loadu_ps(y + 1 * ldy + 0);
    if constexpr (R > 1 && NV > 1) c11 = _mm256_loadu_ps(y + 1 * ldy + 8);
    if constexpr (R > 1 && NV > 2) c12 = _mm256_loadu_ps(y + 1 * ldy + 16);
    if constexpr (R > 1 && NV > 3) c13 = _mm256_loadu_ps(y + 1 * ldy + 24);
    if constexpr (R > 2 && NV > 0) c20 = _mm256_loadu_ps(y + 2 * ldy + 0);
    if constexpr (R > 2 && NV > 1) c21 = _mm256_loadu_ps(y + 2 * ldy + 8);
    if constexpr (R > 2 && NV > 2) c22 = _mm256_loadu_ps(y + 2 * ldy + 16);
    if constexpr (R > 2 && NV > 3) c23 = _mm256_loadu_ps(y + 2 * ldy + 24);
    if constexpr (R > 3 && NV > 0) c30 = _mm256_loadu_ps(y + 3 * ldy + 0);
    if constexpr (R > 3 && NV > 1) c31 = _mm256_loadu_ps(y + 3 * ldy + 8);
    if constexpr (R > 3 && NV > 2) c32 = _mm256_loadu_ps(y + 3 * ldy + 16);
    if constexpr (R > 3 && NV > 3) c33 = _mm256_loadu_ps(y + 3 * ldy + 24);
    if constexpr (R > 4 && NV > 0) c40 = _mm256_loadu_ps(y + 4 * ldy + 0);
    if constexpr (R > 4 && NV > 1) c41 = _mm256_loadu_ps(y + 4 * ldy + 8);
    if constexpr (R > 4 && NV > 2) c42 = _mm256_loadu_ps(y + 4 * ldy + 16);
    if constexpr (R > 4 && NV > 3) c43 = _mm256_loadu_ps(y + 4 * ldy + 24);
    if constexpr (R > 5 && NV > 0) c50 = _mm256_loadu_ps(y + 5 * ldy + 0);
    if constexpr (R > 5 && NV > 1) c51 = _mm256_loadu_ps(y + 5 * ldy + 8);
    if constexpr (R > 5 && NV > 2) c52 = _mm256_loadu_ps(y + 5 * ldy + 16);
    if constexpr (R > 5 && NV > 3) c53 = _mm256_loadu_ps(y + 5 * ldy + 24);
  }
  for (int64_t k = k0; k < k1; ++k) {
    const float* wk = w + k * ldw;
    const __m256 w0 = NV > 0 ? _mm256_loadu_ps(wk + 0) : z;
    const __m256 w1 = NV > 1 ? _mm256_loadu_ps(wk + 8) : z;
    const __m256 w2 = NV > 2 ? _mm256_loadu_ps(wk + 16) : z;
    const __m256 w3 = NV > 3 ? _mm256_loadu_ps(wk + 24) : z;
    if constexpr (R > 0) {
      const __m256 a = _mm256_broadcast_ss(x + 0 * ldx + k);
      if constexpr (NV > 0) c00 = _mm256_fmadd_ps(a, w0, c00);
      if constexpr (NV > 1) c01 = _mm256_fmadd_ps(a, w1, c01);
      if constexpr (NV > 2) c02 = _mm256_fmadd_ps(a, w2, c02);
      if constexpr (NV > 3) c03 = _mm256_fmadd_ps(a, w3, c03);
    }
    if constexpr (R > 1) {
      const __m256 a = _mm256_broadcast_ss(x + 1 * ldx + k);
      if constexpr (NV > 0) c10 = _mm256_fmadd_ps(a, w0, c10);
      if constexpr (NV > 1) c11 = _mm256_fmadd_ps(a, w1, c11);
      if constexpr (NV > 2) c12 = _mm256_fmadd_ps(a, w2, c12);
      if constexpr (NV > 3) c13 = _mm256_fmadd_ps(a, w3, c13);
    }
    if constexpr (R > 2) {
      const __m256 a = _mm256_broadcast_ss(x + 2 * ldx + k);
      if constexpr (NV > 0) c20 = _mm256_fmadd_ps(a, w0, c20);
      if constexpr (NV > 1) c21 = _mm256_fmadd_ps(a, w1, c21);
      if constexpr (NV > 2) c22 = _mm256_fmadd_ps(a, w2, c22);
      if constexpr (NV > 3) c23 = _mm256_fmadd_ps(a, w3, c23);
    }
    if constexpr (R > 3) {
      const __m256 a = _mm256_broadcast_ss(x + 3 * ldx + k);
      if constexpr (NV > 0) c30 = _mm256_fmadd_ps(a, w0, c30);
      if constexpr (NV > 1) c31 = _mm256_fmadd_ps(a, w1, c31);
      if constexpr (NV > 2) c32 = _mm256_fmadd_ps(a, w2, c32);
      if constexpr (NV > 3) c33 = _mm256_fmadd_ps(a, w3, c33);
    }
    if constexpr (R > 4) {
      const __m256 a = _mm256_broadcast_ss(x + 4 * ldx + k);
      if constexpr (NV > 0) c40 = _mm256_fmadd_ps(a, w0, c40);
      if constexpr (NV > 1) c41 = _mm256_fmadd_ps(a, w1, c41);
      if constexpr (NV > 2) c42 = _mm256_fmadd_ps(a, w2, c42);
      if constexpr (NV > 3) c43 = _mm256_fmadd_ps(a, w3, c43);
    }
    if constexpr (R > 5) {
      const __m256 a = _mm256_broadcast_ss(x + 5 * ldx + k);
      if constexpr (NV > 0) c50 = _mm256_fmadd_ps(a, w0, c50);
      if constexpr (NV > 1) c51 = _mm256_fmadd_ps(a, w1, c51);
      if constexpr (NV > 2) c52 = _mm256_fmadd_ps(a, w2, c52);
      if constexpr (NV > 3) c53 = _mm256_fmadd_ps(a, w3, c53);
    }
  }
  if constexpr (R > 0 && NV > 0) _mm256_storeu_ps(y + 0 * ldy + 0, c00);
  if constexpr (R > 0 && NV > 1) _mm256_storeu_ps(y + 0 * ldy + 8, c01);
  if constexpr (R > 0 && NV > 2) _mm256_storeu_ps(y + 0 * ldy + 16, c02);
  if constexpr (R > 0 && NV > 3) _mm256_storeu_ps(y + 0 * ldy + 24, c03);
  if constexpr (R > 1 && NV > 0) _mm256_storeu_ps(y + 1 * ldy + 0, c10);
  if constexpr (R > 1 && NV > 1) _mm256_storeu_ps(y + 1 * ldy + 8, c11);
  if constexpr (R > 1 && NV > 2) _mm256_storeu_ps(y + 1 * ldy + 16, c12);
  if constexpr (R > 1 && NV > 3) _mm256_storeu_ps(y + 1 * ldy + 24, c13);
  if constexpr (R > 2 && NV > 0) _mm256_storeu_ps(y + 2 * ldy + 0, c20);
  if constexpr (R > 2 && NV > 1) _mm256_storeu_ps(y + 2 * ldy + 8, c21);
  if constexpr (R > 2 && NV > 2) _mm256_storeu_ps(y + 2 * ldy + 16, c22);
  if constexpr (R > 2 && NV > 3) _mm256_storeu_ps(y + 2 * ldy + 24, c23);
  if constexpr (R > 3 && NV > 0) _mm256_storeu_ps(y + 3 * ldy + 0, c30);
  if constexpr (R > 3 && NV > 1) _mm256_storeu_ps(y + 3 * ldy + 8, c31);
  if constexpr (R > 3 && NV > 2) _mm256_storeu_ps(y + 3 * ldy + 16, c32);
  if constexpr (R > 3 && NV > 3) _mm256_storeu_ps(y + 3 * ldy + 24, c33);
  if constexpr (R > 4 && NV > 0) _mm256_storeu_ps(y + 4 * ldy + 0, c40);
  if constexpr (R > 4 && NV > 1) _mm256_storeu_ps(y + 4 * ldy + 8, c41);
  if constexpr (R > 4 && NV > 2) _mm256_storeu_ps(y + 4 * ldy + 16, c42);
  if constexpr (R > 4 && NV > 3) _mm256_storeu_ps(y + 4 * ldy + 24, c43);
  if constexpr (R > 5 && NV > 0) _mm256_storeu_ps(y + 5 * ldy + 0, c50);
  if constexpr (R > 5 && NV > 1) _mm256_storeu_ps(y + 5 * ldy + 8, c51);
  if constexpr (R > 5 && NV > 2) _mm256_storeu_ps(y + 5 * ldy + 16, c52);
  if constexpr (R > 5 && NV > 3) _mm256_storeu_ps(y + 5 * ldy + 24, c53);
}
#undef FD_MTP_GEMM_LOAD
#undef FD_MTP_GEMM_STORE

// Columns [n, n + 8 NV) of rows [m, m + R), panel [k0, k1).
template <int NV>
FD_MTP_GEMM_AVX2 void gemm_group(int64_t R, const float* x, int64_t ldx, const float* w,
                                 int64_t ldw, float* y, int64_t ldy, int64_t k0, int64_t k1) {
  switch (R) {
    case 1:
      gemm_tile<1, NV>(x, ldx, w, ldw, y, ldy, k0, k1);
      break;
    case 2:
      gemm_tile<2, NV>(x, ldx, w, ldw, y, ldy, k0, k1);
      break;
    case 3:
      gemm_tile<3, NV>(x, ldx, w, ldw, y, ldy, k0, k1);
      break;
    case 4:
      if constexpr (NV <= 3) gemm_tile<4, NV>(x, ldx, w, ldw, y, ldy, k0, k1);
      break;
    case 5:
      if constexpr (NV <= 2) gemm_tile<5, NV>(x, ldx, w, ldw, y, ldy, k0, k1);
      break;
    case 6:
      if constexpr (NV <= 2) gemm_tile<6, NV>(x, ldx, w, ldw, y, ldy, k0, k1);
      break;
    default:
      break;
  }
}

// Rows [0, M) in g = ceil(M / 6) groups of near-equal size (the first M % g one row larger),
// strips of 8 NV columns from n0 to n_end, panel [k0, k1); then 8-column strips to n_vec.
template <int NV>
FD_MTP_GEMM_AVX2 void gemm_panel(const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
                                 int64_t ldy, int64_t M, int64_t n0, int64_t n_vec, int64_t k0,
                                 int64_t k1) {
  const int64_t groups = (M + 5) / 6, base = M / groups, extra = M % groups;
  int64_t n = n0;
  for (; n + 8 * NV <= n_vec; n += 8 * NV)
    for (int64_t g = 0, m = 0; g < groups; m += base + (g < extra), ++g)
      gemm_group<NV>(base + (g < extra), x + m * ldx, ldx, w + n, ldw, y + m * ldy + n, ldy, k0,
                     k1);
  for (; n < n_vec; n += 8)
    for (int64_t g = 0, m = 0; g < groups; m += base + (g < extra), ++g)
      gemm_group<1>(base + (g < extra), x + m * ldx, ldx, w + n, ldw, y + m * ldy + n, ldy, k0, k1);
}

FD_MTP_GEMM_AVX2 void gemm_avx2(const float* x, int64_t ldx, const float* w, int64_t ldw, float* y,
                                int64_t ldy, int64_t M, int64_t K, int64_t n0, int64_t n1) {
  const int64_t n_vec = n0 + (n1 - n0) / 8 * 8;                // columns the vectors cover
  const int64_t rows = (M + (M + 5) / 6 - 1) / ((M + 5) / 6);  // the largest group
  const int64_t panel = M <= kFewRows ? kKPanelFew : kKPanelMany;
  for (int64_t k0 = 0; k0 < K; k0 += panel) {
    const int64_t k1 = k0 + panel < K ? k0 + panel : K;
    int64_t n = n0;
    if (M == 1) {
      for (; n + 64 <= n_vec; n += 64) gemm_tile_1x8(x, w + n, ldw, y + n, ldy, k0, k1);
      gemm_panel<4>(x, ldx, w, ldw, y, ldy, M, n, n_vec, k0, k1);
    } else if (rows <= 3) {
      gemm_panel<4>(x, ldx, w, ldw, y, ldy, M, n, n_vec, k0, k1);
    } else if (rows == 4) {
      gemm_panel<3>(x, ldx, w, ldw, y, ldy, M, n, n_vec, k0, k1);
    } else {
      gemm_panel<2>(x, ldx, w, ldw, y, ldy, M, n, n_vec, k0, k1);
    }
  }
  if (n_vec < n1) gemm_portable(x, ldx, w, ldw, y, ldy, M, K, n_vec, n1);
}
#undef FD_MTP_GEMM_AVX2
#endif

// y[M, N] = x[M, K] . w[K, N]; leading dimensions ldx >= K, ldw >= N, ldy >= N.
// Only columns [n0, n1) are written (a caller may split the work by columns).
// avx2: the CPU has AVX2 and FMA (cpu_has_avx2_fma()); the result is the same either way.
inline void gemm(const float* x, int64_t ldx, const float* w, int64_t ldw, float* y, int64_t ldy,
                 int64_t M, int64_t K, int64_t n0, int64_t n1, bool avx2) {
#if FD_MTP_GEMM_X86
  if (avx2) {
    gemm_avx2(x, ldx, w, ldw, y, ldy, M, K, n0, n1);
    return;
  }
#endif
  (void)avx2;
  gemm_portable(x, ldx, w, ldw, y, ldy, M, K, n0, n1);
}

// Whether this CPU runs the AVX2 path (a property of the machine, not state).
inline bool cpu_has_avx2_fma() {
#if FD_MTP_GEMM_X86
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
#else
  return false;
#endif
}

}  // namespace cpu_gemm
}  // namespace fd_mtp
