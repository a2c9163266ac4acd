// speculate_verify (spec §5.7): decide, per request, how many of the draft
// tokens the target accepts, write the accepted tokens plus one bonus or
// correction token, and advance step_idx / stop_flags.
//
// Five strategies share the §5.7 loop skeleton (block-stepped / stopped
// requests untouched; benchmark_mode and prefill rows leave the loop;
// accept_all_drafts; ACCEPT with end tokens and max_dec_len; the step-3 token
// and prefill one-step-stop):
//   kVerifyTopP         upstream default: draft in the top-p candidates, the
//                       top-2 window rule, bonus via TOPP when enable_topp
//   kVerifyTopK         SPECULATE_VERIFY_USE_TOPK: draft == candidate 0
//   kVerifyTargetMatch  SPECULATE_VERIFY_USE_TARGET_SAMPLING: draft == the
//                       target's sampled token; bonus = the sampled token
//   kVerifyGreedy       draft == candidate 0 (the argmax); bonus = candidate 0
//   kVerifyRejection    lossless speculative sampling (Leviathan et al. 2023,
//                       Chen et al. 2023) on target_probs (and draft_probs)
// Randomness: Philox4x32-10 (philox.h) keyed by (seed, offset); stream =
// request index, draw = the request's draw number in this call.
// NaN / inf: the float inputs a running request's decision reads must be
// finite, else the call is refused before anything is written: topp[b] and
// the verify_scores rows of the request when TOPP runs (kVerifyTopP /
// kVerifyTopK with enable_topp), its target_probs and draft_probs rows for
// kVerifyRejection.
#pragma once

#include "common.h"
#include "float_bits.h"
#include "philox.h"

namespace fd_mtp {

enum VerifyStrategy : int32_t {
  kVerifyTopP = 0,
  kVerifyTopK = 1,
  kVerifyTargetMatch = 2,
  kVerifyGreedy = 3,
  kVerifyRejection = 4,
};

enum SpeculateVerifyStatus : int32_t {
  kVerifyDraftWidth = 1,
  kVerifyAcceptWidth = 2,
  kVerifyRowStart = 3,
  kVerifyRowsVerifyTokens = 4,
  kVerifyRowsVerifyScores = 5,
  kVerifyRowsCandidateLen = 6,
  kVerifyRowsSampled = 7,
  kVerifyRowsTargetProbs = 8,
  kVerifyRowsDraftProbs = 9,
  kVerifyDraftId = 10,
  kVerifyToppValue = 11,
  kVerifyScoresValue = 12,
  kVerifyTargetProbsValue = 13,
  kVerifyDraftProbsValue = 14,
};

struct SpeculateVerifyParams {
  const int64_t* sampled_token_ids;  // [sampled_rows]
  int64_t sampled_rows;
  int64_t* accept_tokens;  // [>=bsz, accept_cols]
  int64_t accept_cols;
  int32_t* accept_num;
  int64_t* step_idx;
  bool* stop_flags;
  const int32_t* seq_lens_encoder;
  const int64_t* draft_tokens;  // [>=bsz, draft_cols]
  int64_t draft_cols;
  const int32_t* seq_lens_this_time;  // [bsz]
  const int64_t* verify_tokens;       // [verify_rows, num_candidates]
  int64_t verify_rows;
  const float* verify_scores;  // [score_rows, num_candidates]
  int64_t score_rows;
  int64_t num_candidates;  // C >= 1
  const int64_t* max_dec_len;
  const int64_t* end_tokens;  // [num_end_tokens >= 1]
  int64_t num_end_tokens;
  const bool* is_block_step;
  const int32_t* output_cum_offsets;
  const int32_t* actual_candidate_len;  // [candidate_len_rows]
  int64_t candidate_len_rows;
  const float* topp;
  const float* target_probs;  // [target_rows, vocab] (kVerifyRejection only)
  int64_t target_rows;
  const float* draft_probs;  // [draft_prob_rows, vocab] or null (greedy drafter)
  int64_t draft_prob_rows;
  int64_t vocab;
  int64_t bsz;
  int64_t max_seq_len;
  int64_t verify_window;
  uint64_t seed;
  uint64_t offset;
  int32_t strategy;
  bool enable_topp;
  bool benchmark_mode;
  bool accept_all_drafts;
  bool prefill_one_step_stop;
};

// Whether the bonus token is a TOPP sample (reads topp and verify_scores).
FD_HOST_DEVICE inline bool verify_uses_topp(const SpeculateVerifyParams& p) {
  return p.enable_topp && (p.strategy == kVerifyTopP || p.strategy == kVerifyTopK);
}

// Reports the first non-finite value of rows [first, last] of a [rows, cols]
// float32 matrix (value = row, limit = column).
FD_HOST_DEVICE inline bool verify_check_finite(const float* m, int64_t cols, int64_t first,
                                               int64_t last, int32_t code, int64_t b,
                                               KernelStatus* st) {
  for (int64_t r = first; r <= last; ++r)
    for (int64_t c = 0; c < cols; ++c)
      if (!finite_f32(m[r * cols + c])) {
        report(st, code, static_cast<int32_t>(b), r, c);
        return false;
      }
  return true;
}

// First output row of request b.
FD_HOST_DEVICE inline int64_t verify_start(const SpeculateVerifyParams& p, int64_t b) {
  return b * p.max_seq_len - p.output_cum_offsets[b];
}

// Output rows (= accept_tokens / draft_tokens columns) request b may touch:
// one for a prefill row or in benchmark mode, else max(seq_lens_this_time, 1).
FD_HOST_DEVICE inline int64_t verify_used(const SpeculateVerifyParams& p, int64_t b) {
  if (p.benchmark_mode || p.seq_lens_encoder[b] != 0) return 1;
  const int64_t n = p.seq_lens_this_time[b];
  return n > 1 ? n : 1;
}

FD_HOST_DEVICE inline void speculate_verify_check(const SpeculateVerifyParams& p, int64_t b,
                                                  KernelStatus* st) {
  if (p.is_block_step[b] || p.stop_flags[b]) return;
  const int64_t used = verify_used(p, b);
  if (used > p.draft_cols) return report(st, kVerifyDraftWidth, b, used, p.draft_cols);
  if (used > p.accept_cols) return report(st, kVerifyAcceptWidth, b, used, p.accept_cols);
  const int64_t start = verify_start(p, b);
  if (start < 0) return report(st, kVerifyRowStart, b, start, 0);
  const int64_t last = start + used - 1;
  if (last >= p.verify_rows) return report(st, kVerifyRowsVerifyTokens, b, last, p.verify_rows);
  if (last >= p.score_rows) return report(st, kVerifyRowsVerifyScores, b, last, p.score_rows);
  if (last >= p.candidate_len_rows)
    return report(st, kVerifyRowsCandidateLen, b, last, p.candidate_len_rows);
  if (last >= p.sampled_rows) return report(st, kVerifyRowsSampled, b, last, p.sampled_rows);
  if (verify_uses_topp(p)) {
    if (!finite_f32(p.topp[b])) return report(st, kVerifyToppValue, b, 0, 0);
    if (!verify_check_finite(p.verify_scores, p.num_candidates, start, last, kVerifyScoresValue, b,
                             st))
      return;
  }
  if (p.strategy != kVerifyRejection) return;
  if (last >= p.target_rows) return report(st, kVerifyRowsTargetProbs, b, last, p.target_rows);
  if (p.draft_probs != nullptr && last >= p.draft_prob_rows)
    return report(st, kVerifyRowsDraftProbs, b, last, p.draft_prob_rows);
  const int64_t* draft = p.draft_tokens + b * p.draft_cols;
  for (int64_t i = 1; i < used; ++i)
    if (!in_range(draft[i], p.vocab)) return report(st, kVerifyDraftId, b, draft[i], p.vocab);
  if (!verify_check_finite(p.target_probs, p.vocab, start, last, kVerifyTargetProbsValue, b, st))
    return;
  if (p.draft_probs != nullptr)
    verify_check_finite(p.draft_probs, p.vocab, start, last, kVerifyDraftProbsValue, b, st);
}

FD_HOST_DEVICE inline bool verify_is_end(const SpeculateVerifyParams& p, int64_t token) {
  for (int64_t k = 0; k < p.num_end_tokens; ++k)
    if (p.end_tokens[k] == token) return true;
  return false;
}

// ACCEPT(i) of §5.7 and the step-3 write: step_idx += 1, accept_tokens[b, i]
// = token; an end token or step_idx >= max_dec_len stops the request (the
// latter writes end_tokens[0] instead). Returns whether it stopped.
FD_HOST_DEVICE inline bool verify_emit(const SpeculateVerifyParams& p, int64_t b, int64_t i,
                                       int64_t token) {
  int64_t* out = p.accept_tokens + b * p.accept_cols;
  p.step_idx[b] += 1;
  out[i] = token;
  const bool at_max = p.step_idx[b] >= p.max_dec_len[b];
  if (verify_is_end(p, token) || at_max) {
    p.stop_flags[b] = true;
    if (at_max) out[i] = p.end_tokens[0];
    return true;
  }
  return false;
}

FD_HOST_DEVICE inline float verify_uniform(const SpeculateVerifyParams& p, int64_t b,
                                           int64_t draw) {
  return philox_uniform(p.seed, p.offset, static_cast<uint32_t>(b), static_cast<uint32_t>(draw));
}

// TOPP(row) of §5.7 with draw 0 of request b.
FD_HOST_DEVICE inline int64_t verify_topp(const SpeculateVerifyParams& p, int64_t b, int64_t row) {
  const int64_t* tokens = p.verify_tokens + row * p.num_candidates;
  const float* scores = p.verify_scores + row * p.num_candidates;
  int64_t m = p.actual_candidate_len[row];
  if (m > p.num_candidates) m = p.num_candidates;
  const float u = verify_uniform(p, b, 0) * p.topp[b];
  float sum = 0.f;
  for (int64_t k = 0; k < m; ++k) {
    sum += scores[k];
    if (u <= sum) return tokens[k];
  }
  return tokens[0];
}

// Weight of token v at `row` for kVerifyRejection sampling: max(0, p_v - q_v)
// where q is the draft distribution (draft_probs row, or one-hot on `draft`
// for a greedy drafter) when `residual`, else 0.
FD_HOST_DEVICE inline float verify_weight(const SpeculateVerifyParams& p, int64_t row, int64_t v,
                                          bool residual, int64_t draft) {
  float q = 0.f;
  if (residual)
    q = p.draft_probs != nullptr ? p.draft_probs[row * p.vocab + v] : (v == draft ? 1.f : 0.f);
  const float r = p.target_probs[row * p.vocab + v] - q;
  return r > 0.f ? r : 0.f;
}

// Checkpoints of the running sum kept by verify_sample (see there).
constexpr int kVerifySampleMarks = 64;

// Samples a token id from the weights above with uniform u: the first v (id
// order) with u * total <= running sum (float32, id order); when the weights
// sum to 0, the argmax of p (lowest id). One thread walks the vocabulary once
// to get the total, recording the running sum at kVerifySampleMarks block
// ends; the second walk re-sums only the block where the threshold is
// crossed, starting from that block's recorded sum, so every running sum is
// bit-identical to one sequential walk. O(V) per sampled token.
FD_HOST_DEVICE inline int64_t verify_sample(const SpeculateVerifyParams& p, int64_t row, float u,
                                            bool residual, int64_t draft) {
  const int64_t block = (p.vocab + kVerifySampleMarks - 1) / kVerifySampleMarks;
  float marks[kVerifySampleMarks];
  float total = 0.f;
  int num_marks = 0;
  for (int64_t lo = 0; lo < p.vocab; lo += block) {
    const int64_t hi = lo + block < p.vocab ? lo + block : p.vocab;
    for (int64_t v = lo; v < hi; ++v) total += verify_weight(p, row, v, residual, draft);
    marks[num_marks++] = total;
  }
  if (total > 0.f) {
    const float threshold = u * total;  // <= total: some block end reaches it
    int c = 0;
    while (c < num_marks - 1 && !(threshold <= marks[c])) ++c;
    float sum = c > 0 ? marks[c - 1] : 0.f;
    const int64_t lo = c * block;
    const int64_t hi = lo + block < p.vocab ? lo + block : p.vocab;
    for (int64_t v = lo; v < hi; ++v) {
      sum += verify_weight(p, row, v, residual, draft);
      if (threshold <= sum) return v;
    }
  }
  const float* probs = p.target_probs + row * p.vocab;
  int64_t best = 0;
  for (int64_t v = 1; v < p.vocab; ++v)
    if (probs[v] > probs[best]) best = v;
  return best;
}

FD_HOST_DEVICE inline void speculate_verify_apply(const SpeculateVerifyParams& p, int64_t b) {
  if (p.is_block_step[b] || p.stop_flags[b]) return;
  const int64_t C = p.num_candidates;
  const int64_t* draft = p.draft_tokens + b * p.draft_cols;
  int64_t* out = p.accept_tokens + b * p.accept_cols;
  const int64_t start = verify_start(p, b);
  const int64_t n = p.seq_lens_this_time[b];
  int64_t acc = 1;
  int64_t i = 0;
  bool stopped = false;
  bool have_token = false;  // kVerifyRejection: the correction token after a rejection
  int64_t token = 0;

  while (i < n - 1) {
    if (p.benchmark_mode || p.seq_lens_encoder[b] != 0) break;
    const int64_t d = draft[i + 1];
    const int64_t row = start + i;
    bool accept = p.accept_all_drafts;
    if (!accept) {
      switch (p.strategy) {
        case kVerifyTargetMatch:
          accept = p.sampled_token_ids[row] == d;
          break;
        case kVerifyTopK:
        case kVerifyGreedy:
          accept = p.verify_tokens[row * C] == d;
          break;
        case kVerifyRejection: {
          const float u = verify_uniform(p, b, 2 * i);
          const float q = p.draft_probs != nullptr ? p.draft_probs[row * p.vocab + d] : 1.f;
          accept = u * q <= p.target_probs[row * p.vocab + d];
          if (!accept) {
            token = verify_sample(p, row, verify_uniform(p, b, 2 * i + 1), true, d);
            have_token = true;
          }
          break;
        }
        default: {  // kVerifyTopP
          const int64_t* cand = p.verify_tokens + row * C;
          int64_t m = p.actual_candidate_len[row];
          if (m > C) m = C;
          for (int64_t k = 0; k < m && !accept; ++k) accept = cand[k] == d;
          if (!accept && C >= 2 && cand[1] == d) {
            // Top-2 window rule: the draft is the second candidate and the
            // next verify_window drafts are top-1 matches.
            int64_t j = 0, ii = i + 1;
            while (j < p.verify_window && ii < n - 1 &&
                   p.verify_tokens[(start + ii) * C] == draft[ii + 1]) {
              ++j;
              ++ii;
            }
            if (j >= p.verify_window) {
              acc += p.verify_window + 1;
              p.step_idx[b] += p.verify_window + 1;
              int64_t k = i;
              for (; k < ii; ++k) {
                const int64_t t = draft[k + 1];
                out[k] = t;
                const bool at_max = p.step_idx[b] >= p.max_dec_len[b];
                if (verify_is_end(p, t) || at_max) {
                  p.stop_flags[b] = true;
                  stopped = true;
                  if (at_max) out[k] = p.end_tokens[0];
                  acc -= 1;
                  p.step_idx[b] -= 1;
                  break;
                }
              }
              i = k;  // ii when no stop
            }
          }
          break;  // not accepted: every top-2 outcome leaves the loop
        }
      }
    }
    if (!accept) break;
    if (verify_emit(p, b, i, d)) {
      stopped = true;
      break;
    }
    ++acc;
    ++i;
  }
  if (!stopped) {
    const int64_t row = start + i;
    if (!have_token) {
      switch (p.strategy) {
        case kVerifyTargetMatch:
          token = p.sampled_token_ids[row];
          break;
        case kVerifyGreedy:
          token = p.verify_tokens[row * C];
          break;
        case kVerifyRejection:
          token = verify_sample(p, row, verify_uniform(p, b, 2 * i + 1), false, -1);
          break;
        default:  // kVerifyTopP, kVerifyTopK
          token = p.enable_topp ? verify_topp(p, b, row) : p.verify_tokens[row * C];
      }
    }
    if (p.prefill_one_step_stop) p.stop_flags[b] = true;
    verify_emit(p, b, i, token);
  }
  p.accept_num[b] = static_cast<int32_t>(acc);
}

// CPU driver: checks every request, then applies; on bad input nothing is written.
inline KernelStatus speculate_verify_cpu(const SpeculateVerifyParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) speculate_verify_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bsz; ++b) speculate_verify_apply(p, b);
  return st;
}

}  // namespace fd_mtp
