// top_p_candidates (spec §5.6): for every packed probs row, the C most probable
// tokens, and how many of them the top-p mass of the row's request needs.
//
// Order (a deliberate, documented difference from upstream, whose tie order is
// unspecified): probability descending, ties by the LOWER token id first. This
// is a total order, so slot 0 is exactly numpy's argmax (first maximum) and the
// CPU driver, the CUDA kernel and the numpy reference agree exactly. Values
// are compared as float32 with -0.0 == +0.0. A NaN or inf in a probs row, or
// in the top_p entry of a row's request, is refused (kTopPProbs / kTopPTopP):
// the outputs are new tensors, so a refused call returns nothing.
//
// Per row r of request b = (r + output_padding_offset[r]) div max_seq_len:
// slots i = 0.. hold (token, prob) in that order; sum += float(prob_i) in
// float32; at the first i with sum >= top_p[b]: actual = i + 1 and later
// slots stay 0. If the sum never reaches top_p[b], all C slots are filled and
// actual is 0, or C when top_p[b] == 1.0 exactly.
#pragma once

#include <algorithm>
#include <cstring>
#include <functional>

#include "common.h"
#include "float_bits.h"

namespace fd_mtp {

enum TopPCandidatesStatus : int32_t {
  kTopPNegativeRow = 1,
  kTopPRequestRow = 2,
  kTopPTopP = 3,
  kTopPProbs = 4,
};

struct TopPCandidatesParams {
  const void* probs;  // [rows, vocab], float_kind
  int64_t rows;
  int64_t vocab;
  FloatKind float_kind;
  const void* top_p;  // [bs], probs dtype
  int64_t bs;
  const int32_t* output_padding_offset;  // [>= rows]
  int64_t candidates;                    // C, 1 <= C <= vocab
  int64_t max_seq_len;
  void* verify_scores;             // [rows, C], probs dtype, written (every slot)
  int64_t* verify_tokens;          // [rows, C], written (every slot)
  int32_t* actual_candidate_lens;  // [rows], written
};

// Unsigned key, increasing with the float value, equal for -0.0 and +0.0.
FD_HOST_DEVICE inline uint32_t top_p_key(float v) {
  uint32_t u = f32_bits(v);
  if (u == 0x80000000u) u = 0;
  return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

// True when (key_a, id_a) ranks before (key_b, id_b).
FD_HOST_DEVICE inline bool top_p_before(uint32_t key_a, int64_t id_a, uint32_t key_b,
                                        int64_t id_b) {
  return key_a > key_b || (key_a == key_b && id_a < id_b);
}

FD_HOST_DEVICE inline int64_t top_p_request(const TopPCandidatesParams& p, int64_t r) {
  const int64_t pos = r + static_cast<int64_t>(p.output_padding_offset[r]);
  return pos < 0 ? -1 : pos / p.max_seq_len;
}

FD_HOST_DEVICE inline void top_p_check_row(const TopPCandidatesParams& p, int64_t r,
                                           KernelStatus* st) {
  const int64_t b = top_p_request(p, r);
  if (b < 0)
    report(st, kTopPNegativeRow, -1, r, p.output_padding_offset[r]);
  else if (b >= p.bs)
    report(st, kTopPRequestRow, -1, b, p.bs);
  else if (!finite_f32(load_float(p.top_p, p.float_kind, b)))
    report(st, kTopPTopP, static_cast<int32_t>(b), 0, 0);
}

// Reports the first non-finite value of probs row r (v = its column).
FD_HOST_DEVICE inline void top_p_check_value(int64_t r, int64_t v, float x, KernelStatus* st) {
  if (!finite_f32(x)) report(st, kTopPProbs, -1, r, v);
}

// Given row r's C candidates in order (ids, values as stored), writes the
// outputs of the row: every slot, then the accepted length.
template <typename Traits>
FD_HOST_DEVICE inline void top_p_write_row(const TopPCandidatesParams& p, int64_t r,
                                           const int64_t* ids,
                                           const typename Traits::Storage* values) {
  using S = typename Traits::Storage;
  const int64_t b = top_p_request(p, r);
  const float top_p = Traits::load(static_cast<const S*>(p.top_p)[b]);
  S* scores = static_cast<S*>(p.verify_scores) + r * p.candidates;
  int64_t* tokens = p.verify_tokens + r * p.candidates;
  float sum = 0.0f;
  int32_t actual = 0;
  for (int64_t i = 0; i < p.candidates; ++i) {
    if (actual == 0) {
      scores[i] = values[i];
      tokens[i] = ids[i];
      sum += Traits::load(values[i]);
      if (sum >= top_p) actual = static_cast<int32_t>(i + 1);
    } else {
      scores[i] = Traits::store(0.0f);
      tokens[i] = 0;
    }
  }
  if (actual == 0 && top_p == 1.0f) actual = static_cast<int32_t>(p.candidates);
  p.actual_candidate_lens[r] = actual;
}

// CPU driver: checks every row first, then one pass per row keeping the best C
// in a sorted buffer (a new entry enters only when it ranks before the last).
template <typename Traits>
inline KernelStatus top_p_candidates_cpu_typed(const TopPCandidatesParams& p) {
  using S = typename Traits::Storage;
  KernelStatus st{};
  for (int64_t r = 0; r < p.rows && st.code == 0; ++r) top_p_check_row(p, r, &st);
  if (st.code != 0) return st;
  constexpr int kMaxC = 100;
  constexpr int64_t kBlock = 16;
  int64_t ids[kMaxC];
  float keys[kMaxC];  // float32 values: for non-NaN values, comparing them is comparing keys
  S values[kMaxC];
  const int64_t c = p.candidates;
  for (int64_t r = 0; r < p.rows; ++r) {
    const S* row = static_cast<const S*>(p.probs) + r * p.vocab;
    // The row's values must be finite (a separate pass: the selection below skips values).
    bool finite = true;
    for (int64_t v = 0; v < p.vocab; ++v) finite &= finite_f32(Traits::load(row[v]));
    if (!finite) {
      for (int64_t v = 0; v < p.vocab && st.code == 0; ++v)
        top_p_check_value(r, v, Traits::load(row[v]), &st);
      return st;
    }
    int64_t n = 0;
    // Inserts column v when it ranks before the last kept entry (ids increase, so an equal
    // value never does); -0.0 == +0.0 as float32 comparisons, like top_p_key.
    auto offer = [&](int64_t v) {
      const float x = Traits::load(row[v]);
      if (n == c && !(x > keys[c - 1])) return;
      if (n < c) ++n;
      // First slot holding a smaller value (keys are non-increasing); shift the rest down.
      const int64_t i = std::upper_bound(keys, keys + n - 1, x, std::greater<float>()) - keys;
      const size_t moved = static_cast<size_t>(n - 1 - i);
      std::memmove(keys + i + 1, keys + i, moved * sizeof(float));
      std::memmove(ids + i + 1, ids + i, moved * sizeof(int64_t));
      std::memmove(values + i + 1, values + i, moved * sizeof(S));
      keys[i] = x;
      ids[i] = v;
      values[i] = row[v];
    };
    int64_t v = 0;
    for (; v < p.vocab && n < c; ++v) offer(v);
    // Blocks whose maximum does not beat the last kept value are skipped whole.
    for (; v + kBlock <= p.vocab; v += kBlock) {
      float m = Traits::load(row[v]);
      for (int64_t k = 1; k < kBlock; ++k) {
        const float x = Traits::load(row[v + k]);
        m = x > m ? x : m;
      }
      if (m > keys[c - 1])
        for (int64_t k = 0; k < kBlock; ++k) offer(v + k);
    }
    for (; v < p.vocab; ++v) offer(v);
    top_p_write_row<Traits>(p, r, ids, values);
  }
  return st;
}

inline KernelStatus top_p_candidates_cpu(const TopPCandidatesParams& p) {
  return dispatch_float(
      p.float_kind, [&](auto traits) { return top_p_candidates_cpu_typed<decltype(traits)>(p); });
}

}  // namespace fd_mtp
