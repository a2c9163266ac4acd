// speculate_get_token_penalty_multi_scores (spec §5.5): min-length EOS
// masking, repetition / frequency / presence penalties, temperature and bad
// words on the packed logits rows of a speculative step, in place.
//
// Every logits row r belongs to request b = (r + output_padding_offset[r])
// div max_seq_len; rows with b >= bs are left untouched. Per row, in order:
//   1. min length: when cur_len[b] >= 0 and cur_len[b] + (r - first_row(b)) <
//      min_len[b], every EOS column is set to the dtype's sentinel;
//   2. repeat counts of pre_ids[b] (only when cur_len[b] >= 0) with upstream's
//      scan rule: lane t of bd = min(ceil32(Lp), 512) lanes visits t, t+bd, ...
//      and stops at its first negative id;
//   3. every column v: x = float(logit); if count(v) > 0:
//      x = (x < 0 ? x * alpha : x / alpha); x = (x - count * beta) - gamma;
//      then x = x / temperature; stored once, rounded to the logits dtype;
//   4. bad words: bad_tokens[0..Lb) (row 0 only), each id in [0, V) set to the
//      dtype's value of -1e10.
// NaN / inf: logits are transformed element by element in IEEE arithmetic (a
// NaN stays NaN, an inf stays an inf of the sign the operations give); a
// non-finite penalty, frequency, presence score or temperature of a request
// that owns a row would make every logit of its rows meaningless: refused.
// All arithmetic is float32, each operation rounded (no fused multiply-add),
// so the CPU driver, the CUDA kernel and the numpy reference agree bit for bit.
#pragma once

#include <algorithm>
#include <vector>

#include "common.h"
#include "float_bits.h"

namespace fd_mtp {

enum TokenPenaltyStatus : int32_t {
  kPenaltyEosId = 1,
  kPenaltyPreIds = 2,
  kPenaltyOffset = 3,
  kPenaltyPenaltyScore = 4,
  kPenaltyFrequencyScore = 5,
  kPenaltyPresenceScore = 6,
  kPenaltyTemperature = 7,
};

struct TokenPenaltyParams {
  const int64_t* pre_ids;  // [>= bs, pre_ids_cols]
  int64_t pre_ids_cols;
  void* logits;  // [rows, vocab], float_kind
  int64_t rows;
  int64_t vocab;
  FloatKind float_kind;
  const void* penalty_scores;    // [>= bs], logits dtype
  const void* frequency_scores;  // [>= bs], logits dtype
  const void* presence_scores;   // [>= bs], logits dtype
  const float* temperatures;     // [>= bs]
  const int64_t* bad_tokens;     // first num_bad_tokens entries (row 0)
  int64_t num_bad_tokens;
  const int64_t* cur_len;  // [>= bs]
  const int64_t* min_len;  // [>= bs]
  const int64_t* eos_token_id;
  int64_t num_eos;
  const int32_t* output_padding_offset;  // [>= rows]
  const int32_t* output_cum_offsets;     // [>= bs]
  int64_t bs;
  int64_t max_seq_len;
  int32_t* counts;      // CUDA workspace [counts_rows, vocab] int32, zero on entry and left zero
  int64_t counts_rows;  // the apply kernel's grid: min(max(rows, 1), 128)
};

// Upstream's block width of the repeat-count kernel (the scan rule's lanes).
FD_HOST_DEVICE inline int64_t penalty_lanes(int64_t pre_ids_cols) {
  const int64_t ceil32 = (pre_ids_cols + 31) / 32 * 32;
  return ceil32 < 512 ? ceil32 : 512;
}

// Request of logits row r: b >= 0, or -1 when p = r + offset < 0 (invalid).
FD_HOST_DEVICE inline int64_t penalty_request(const TokenPenaltyParams& p, int64_t r) {
  const int64_t pos = r + static_cast<int64_t>(p.output_padding_offset[r]);
  return pos < 0 ? -1 : pos / p.max_seq_len;
}

FD_HOST_DEVICE inline bool penalty_min_length_applies(const TokenPenaltyParams& p, int64_t r,
                                                      int64_t b) {
  if (p.cur_len[b] < 0) return false;
  const int64_t first_row = b * p.max_seq_len - static_cast<int64_t>(p.output_cum_offsets[b]);
  return p.cur_len[b] + (r - first_row) < p.min_len[b];
}

// The value a penalised entry takes before rounding: x, seen `count` > 0 times.
FD_HOST_DEVICE inline float penalty_value(float x, int64_t count, float alpha, float beta,
                                          float gamma, float temperature) {
  x = x < 0.0f ? mul_rn(x, alpha) : div_rn(x, alpha);
  x = sub_rn(sub_rn(x, mul_rn(static_cast<float>(count), beta)), gamma);
  return div_rn(x, temperature);
}

// Min-length sentinel: -1e4 for float16 (upstream), -1e10 otherwise.
template <typename Traits>
FD_HOST_DEVICE inline typename Traits::Storage penalty_min_length_value() {
  return Traits::store(Traits::kind == kFloat16 ? -1e4f : -1e10f);
}

// Bad-word value: -1e10 in the logits dtype (float16: -inf).
template <typename Traits>
FD_HOST_DEVICE inline typename Traits::Storage penalty_bad_word_value() {
  return Traits::store(-1e10f);
}

// Validates the batch-wide EOS ids (0 <= id < V); every call, whether or not
// min length applies, since they index logits columns.
FD_HOST_DEVICE inline void penalty_check_eos(const TokenPenaltyParams& p, int64_t i,
                                             KernelStatus* st) {
  const int64_t id = p.eos_token_id[i];
  if (!in_range(id, p.vocab)) report(st, kPenaltyEosId, -1, id, p.vocab);
}

// Validates the per-request scalars of request b (a request that owns a row):
// each must be finite.
FD_HOST_DEVICE inline void penalty_check_scalars(const TokenPenaltyParams& p, int64_t b,
                                                 KernelStatus* st) {
  const int32_t req = static_cast<int32_t>(b);
  if (!finite_f32(load_float(p.penalty_scores, p.float_kind, b)))
    report(st, kPenaltyPenaltyScore, req, 0, 0);
  else if (!finite_f32(load_float(p.frequency_scores, p.float_kind, b)))
    report(st, kPenaltyFrequencyScore, req, 0, 0);
  else if (!finite_f32(load_float(p.presence_scores, p.float_kind, b)))
    report(st, kPenaltyPresenceScore, req, 0, 0);
  else if (!finite_f32(p.temperatures[b]))
    report(st, kPenaltyTemperature, req, 0, 0);
}

// Validates row r's request index and the ids its repeat count visits in
// lane `lane` (0 <= lane < penalty_lanes).
FD_HOST_DEVICE inline void penalty_check_lane(const TokenPenaltyParams& p, int64_t b, int64_t lane,
                                              KernelStatus* st) {
  const int64_t bd = penalty_lanes(p.pre_ids_cols);
  const int64_t* row = p.pre_ids + b * p.pre_ids_cols;
  for (int64_t j = lane; j < p.pre_ids_cols; j += bd) {
    const int64_t id = row[j];
    if (id < 0) break;
    if (id >= p.vocab) {
      report(st, kPenaltyPreIds, static_cast<int32_t>(b), id, p.vocab);
      return;
    }
  }
}

// CPU driver. Checks everything first (nothing written on bad input), then
// applies the four steps row by row. Counts only the ids that occur: the
// visited ids of a row are sorted and run-length counted.
template <typename Traits>
inline KernelStatus token_penalty_cpu_typed(const TokenPenaltyParams& p) {
  using S = typename Traits::Storage;
  KernelStatus st{};
  for (int64_t i = 0; i < p.num_eos && st.code == 0; ++i) penalty_check_eos(p, i, &st);
  const int64_t bd = penalty_lanes(p.pre_ids_cols);
  for (int64_t r = 0; r < p.rows && st.code == 0; ++r) {
    const int64_t b = penalty_request(p, r);
    if (b < 0) {
      report(&st, kPenaltyOffset, -1, r, p.output_padding_offset[r]);
      break;
    }
    if (b >= p.bs) continue;
    penalty_check_scalars(p, b, &st);
    if (p.cur_len[b] < 0) continue;
    for (int64_t lane = 0; lane < bd && st.code == 0; ++lane) penalty_check_lane(p, b, lane, &st);
  }
  if (st.code != 0) return st;

  S* logits = static_cast<S*>(p.logits);
  const S* alpha_s = static_cast<const S*>(p.penalty_scores);
  const S* beta_s = static_cast<const S*>(p.frequency_scores);
  const S* gamma_s = static_cast<const S*>(p.presence_scores);
  const S min_len_value = penalty_min_length_value<Traits>();
  const S bad_value = penalty_bad_word_value<Traits>();
  std::vector<int64_t> ids;
  ids.reserve(static_cast<size_t>(p.pre_ids_cols));
  for (int64_t r = 0; r < p.rows; ++r) {
    const int64_t b = penalty_request(p, r);
    if (b >= p.bs) continue;
    S* row = logits + r * p.vocab;
    // 1. min length
    if (penalty_min_length_applies(p, r, b))
      for (int64_t i = 0; i < p.num_eos; ++i) row[p.eos_token_id[i]] = min_len_value;
    // 2. repeat counts of the visited ids (sorted, run-length counted)
    ids.clear();
    if (p.cur_len[b] >= 0) {
      const int64_t* pre = p.pre_ids + b * p.pre_ids_cols;
      for (int64_t lane = 0; lane < bd; ++lane)
        for (int64_t j = lane; j < p.pre_ids_cols && pre[j] >= 0; j += bd) ids.push_back(pre[j]);
      std::sort(ids.begin(), ids.end());
    }
    // 3. one pass over the row in column order: the spans between counted ids get the
    // temperature only, each counted id its penalty too (read before anything else wrote it).
    const float alpha = Traits::load(alpha_s[b]);
    const float beta = Traits::load(beta_s[b]);
    const float gamma = Traits::load(gamma_s[b]);
    const float temperature = p.temperatures[b];
    int64_t v = 0;
    for (size_t i = 0; i < ids.size();) {
      size_t j = i + 1;
      while (j < ids.size() && ids[j] == ids[i]) ++j;
      const int64_t id = ids[i];
      for (; v < id; ++v) row[v] = Traits::store(div_rn(Traits::load(row[v]), temperature));
      row[id] = Traits::store(penalty_value(Traits::load(row[id]), static_cast<int64_t>(j - i),
                                            alpha, beta, gamma, temperature));
      v = id + 1;
      i = j;
    }
    for (; v < p.vocab; ++v) row[v] = Traits::store(div_rn(Traits::load(row[v]), temperature));
    // 4. bad words (row 0 of bad_tokens for every request)
    for (int64_t i = 0; i < p.num_bad_tokens; ++i) {
      const int64_t id = p.bad_tokens[i];
      if (in_range(id, p.vocab)) row[id] = bad_value;
    }
  }
  return st;
}

inline KernelStatus token_penalty_cpu(const TokenPenaltyParams& p) {
  return dispatch_float(p.float_kind,
                        [&](auto traits) { return token_penalty_cpu_typed<decltype(traits)>(p); });
}

}  // namespace fd_mtp
