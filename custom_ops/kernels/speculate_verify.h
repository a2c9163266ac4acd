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
//
// kVerifyRejection, what a request reads (its "plan", verify_rejection_plan):
// the accept walk reads target_probs[row, d] (and draft_probs[row, d]) of each
// draft d it tests, in position order; then, unless an accepted draft stopped
// the request, ONE row is sampled from: the rejected position's row (weights
// max(0, p - q), q = the draft_probs row or one-hot on the draft) or the bonus
// row (weights p; draft_probs is not read). Nothing else of the two matrices is
// read.
//
// Blockwise sampling sums (the definition the CPU driver, the CUDA kernel and
// the numpy reference share bit for bit; fixed, independent of any launch
// shape). The vocabulary is cut into chunks of kVerifyChunk = 1024 ids; id
// v = 1024 c + 32 j + l is step j (0..31) of lane l (0..31) of chunk c (ids
// >= V are absent: weight 0, and adding 0 is exact). With w_v the float32
// weight:
//   L[c][l] = (((w(c,l,0) + w(c,l,1)) + w(c,l,2)) + ...)   lane sum, j order
//   Q[c][l] = Q[c][l-1] + L[c][l],  Q[c][-1] = 0            lanes in order
//   S[c]    = Q[c][31]                                      chunk sum
//   P[c]    = P[c-1] + S[c],  P[-1] = 0;  total = P[last]   chunks in order
// (every sum a float32 add, left to right as written). Inverse CDF with the
// draw u in (0, 1]: t = u * total; the chunk c* = the first c with S[c] > 0
// and t <= P[c]; in it the lane l* = the first l with L > 0 and t <= P[c*-1]
// + Q[c*][l]; in it the step j* = the first j with w > 0 and t <= P[c*-1] +
// (Q[c*][l*-1] + s_j), s_j the lane's running sum through step j. The CDF so
// defined is monotone and ends each chunk / lane exactly at the sum above it
// (Q[l-1] + L[l] = Q[l], P[c-1] + S[c] = P[c]), so the search always ends on
// an id of positive weight, and tokens are drawn with probability w_v / total
// up to float32 rounding (in the enumeration order chunk, lane, step: a fixed
// permutation of the ids). total == 0 (p <= q everywhere): the argmax of p
// (lowest id on ties). On the GPU a block computes the lane sums of a chunk
// with one warp (lane l reads ids 32 j + l: coalesced), the 32-lane and
// chunk prefixes sequentially in one thread each; the CPU runs the same adds.
//
// NaN / inf: the float inputs a running request's decision reads must be
// finite, else the call is refused before anything is written: topp[b] and
// the verify_scores rows of the request when TOPP runs (kVerifyTopP /
// kVerifyTopK with enable_topp); for kVerifyRejection the entries its accept
// walk reads (target, then draft, per position) and then every column of the
// row(s) it samples from (target, then draft for a residual with
// draft_probs): exactly what the plan reads. Nothing may be written before
// every request passed, so the CUDA check pass, which reads the sampled rows
// anyway, also samples them and leaves the token in p.sample_tokens for the
// apply pass (one read of each row); when a binding passes no such workspace
// the apply pass reads the rows again (2x the floor on them).
#pragma once

#include <vector>

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
  kVerifyVocabTooLarge = 15,  // the CUDA kernel only (kVerifyMaxChunks)
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
  // The CUDA launcher's workspace for kVerifyRejection: [bsz] int64 on the
  // device, or null. With it the check pass also samples (one read of each
  // sampled row) and keeps the token here for the apply pass; without it the
  // apply pass reads the row again (speculate_verify.cu). Never read on the CPU.
  int64_t* sample_tokens;
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

// ---- kVerifyRejection: blockwise sampling sums (see the file comment) -------------------------

constexpr int64_t kVerifyLanes = 32;
constexpr int64_t kVerifySteps = 32;
constexpr int64_t kVerifyChunk = kVerifyLanes * kVerifySteps;  // 1024 ids
// The CUDA kernel keeps the chunk sums of the row it samples in shared memory
// (16 KiB): it takes vocabularies up to 4096 chunks (4,194,304 ids) and
// reports kVerifyVocabTooLarge above that; the CPU driver has no limit.
constexpr int64_t kVerifyMaxChunks = 4096;

FD_HOST_DEVICE inline int64_t verify_num_chunks(int64_t vocab) {
  return (vocab + kVerifyChunk - 1) / kVerifyChunk;
}

// Weight of id v at `row`: max(0, p_v - q_v) where q is the draft distribution
// (the draft_probs row, or one-hot on `draft` for a greedy drafter) when
// `residual`, else p_v itself (max(0, p_v - 0)).
FD_HOST_DEVICE inline float verify_weight(const SpeculateVerifyParams& p, int64_t row, int64_t v,
                                          bool residual, int64_t draft) {
  float q = 0.f;
  if (residual)
    q = p.draft_probs != nullptr ? p.draft_probs[row * p.vocab + v] : (v == draft ? 1.f : 0.f);
  const float r = p.target_probs[row * p.vocab + v] - q;
  return r > 0.f ? r : 0.f;
}

// L[c][l]: the sum of lane l of chunk c, steps in order (the GPU's per-thread
// loop; ids past the vocabulary add nothing).
FD_HOST_DEVICE inline float verify_lane_sum(const SpeculateVerifyParams& p, int64_t row, int64_t c,
                                            int64_t l, bool residual, int64_t draft) {
  float s = 0.f;
  const int64_t base = c * kVerifyChunk + l;
  if ((c + 1) * kVerifyChunk <= p.vocab) {
    // A whole chunk: the weight's cases hoisted, no bound checks, so the GPU
    // issues the 32 (or 64) loads back to back. Same adds as below.
    const float* prow = p.target_probs + row * p.vocab;
    if (residual && p.draft_probs != nullptr) {
      const float* qrow = p.draft_probs + row * p.vocab;
#if defined(__CUDA_ARCH__) && defined(__NVCC__)
#pragma unroll
#endif
      for (int64_t j = 0; j < kVerifySteps; ++j) {
        const int64_t v = base + j * kVerifyLanes;
        const float r = prow[v] - qrow[v];
        s += r > 0.f ? r : 0.f;
      }
    } else {
      const int64_t hot = residual ? draft : -1;  // a greedy drafter's one-hot q
#if defined(__CUDA_ARCH__) && defined(__NVCC__)
#pragma unroll
#endif
      for (int64_t j = 0; j < kVerifySteps; ++j) {
        const int64_t v = base + j * kVerifyLanes;
        const float r = prow[v] - (v == hot ? 1.f : 0.f);
        s += r > 0.f ? r : 0.f;
      }
    }
    return s;
  }
  for (int64_t j = 0; j < kVerifySteps; ++j) {
    const int64_t v = base + j * kVerifyLanes;
    if (v < p.vocab) s += verify_weight(p, row, v, residual, draft);
  }
  return s;
}

// S[c] from the 32 lane sums: Q[c][31], lanes in order.
FD_HOST_DEVICE inline float verify_chunk_sum(const float* lanes) {
  float q = 0.f;
  for (int64_t l = 0; l < kVerifyLanes; ++l) q += lanes[l];
  return q;
}

// total = P[last] from the chunk sums, chunks in order.
FD_HOST_DEVICE inline float verify_total(const float* sums, int64_t chunks) {
  float total = 0.f;
  for (int64_t c = 0; c < chunks; ++c) total += sums[c];
  return total;
}

// The chunk c* of threshold t (0 < t <= total, total > 0) and P[c*-1] in
// *before; -1 when none (unreachable for such t: the last chunk of positive
// sum ends at total).
FD_HOST_DEVICE inline int64_t verify_find_chunk(const float* sums, int64_t chunks, float t,
                                                float* before) {
  float prefix = 0.f;
  for (int64_t c = 0; c < chunks; ++c) {
    const float next = prefix + sums[c];
    if (sums[c] > 0.f && t <= next) {
      *before = prefix;
      return c;
    }
    prefix = next;
  }
  return -1;
}

// The id of threshold t inside chunk c (lane sums `lanes`, P[c-1] = before),
// or -1 when none (unreachable when c = verify_find_chunk's answer).
FD_HOST_DEVICE inline int64_t verify_find_in_chunk(const SpeculateVerifyParams& p, int64_t row,
                                                   int64_t c, const float* lanes, float before,
                                                   float t, bool residual, int64_t draft) {
  float q = 0.f;  // Q[c][l-1]
  for (int64_t l = 0; l < kVerifyLanes; ++l) {
    const float next = q + lanes[l];
    if (lanes[l] > 0.f && t <= before + next) {
      float s = 0.f;
      for (int64_t j = 0; j < kVerifySteps; ++j) {
        const int64_t v = c * kVerifyChunk + j * kVerifyLanes + l;
        if (v >= p.vocab) break;
        const float w = verify_weight(p, row, v, residual, draft);
        s += w;
        if (w > 0.f && t <= before + (q + s)) return v;
      }
      return -1;
    }
    q = next;
  }
  return -1;
}

// The argmax of the target row (lowest id on ties): the token when the
// weights sum to 0.
FD_HOST_DEVICE inline int64_t verify_argmax(const SpeculateVerifyParams& p, int64_t row) {
  const float* probs = p.target_probs + row * p.vocab;
  int64_t best = 0;
  for (int64_t v = 1; v < p.vocab; ++v)
    if (probs[v] > probs[best]) best = v;
  return best;
}

// ---- kVerifyRejection: the plan (what a request reads and writes) ----------------------------

// The outcome of a request's accept walk, before any sampling.
struct VerifyPlan {
  int64_t accepted;  // drafts accepted (emitted in columns 0..accepted-1)
  int64_t row;       // the row the last token is sampled from; -1: no sample (stopped on a draft)
  int64_t draft;     // the rejected draft (residual weights) or -1 (the bonus: weights p)
  int64_t draw;      // the draw number of the sample (2i + 1)
  bool stopped;      // an accepted draft stopped the request (end token or max_dec_len)
};

// The accept walk of §5.7 under kVerifyRejection (draw 2i at position i),
// writing nothing: it tests drafts left to right (u * q(d) <= p(d), q = 1 for
// a greedy drafter), follows step_idx for end tokens and max_dec_len as
// verify_emit does, and stops at the first rejection, at a stop, or after the
// last draft. With `st`, every entry it reads must be finite (reported as
// kVerifyTargetProbsValue / kVerifyDraftProbsValue; returns false). For a
// running request (not block-stepped or stopped).
FD_HOST_DEVICE inline bool verify_rejection_plan(const SpeculateVerifyParams& p, int64_t b,
                                                 VerifyPlan* plan, KernelStatus* st) {
  const int64_t* draft = p.draft_tokens + b * p.draft_cols;
  const int64_t start = verify_start(p, b);
  const int64_t n = p.seq_lens_this_time[b];
  int64_t step = p.step_idx[b];
  int64_t i = 0;
  plan->draft = -1;
  plan->stopped = false;
  const bool walk = !(p.benchmark_mode || p.seq_lens_encoder[b] != 0);
  while (walk && i < n - 1) {
    const int64_t d = draft[i + 1];
    const int64_t row = start + i;
    if (!p.accept_all_drafts) {
      const float pv = p.target_probs[row * p.vocab + d];
      const float qv = p.draft_probs != nullptr ? p.draft_probs[row * p.vocab + d] : 1.f;
      if (st != nullptr) {
        if (!finite_f32(pv)) {
          report(st, kVerifyTargetProbsValue, static_cast<int32_t>(b), row, d);
          return false;
        }
        if (!finite_f32(qv)) {
          report(st, kVerifyDraftProbsValue, static_cast<int32_t>(b), row, d);
          return false;
        }
      }
      if (!(verify_uniform(p, b, 2 * i) * qv <= pv)) {
        plan->draft = d;
        break;
      }
    }
    step += 1;
    if (verify_is_end(p, d) || step >= p.max_dec_len[b]) {
      plan->stopped = true;
      break;
    }
    ++i;
  }
  plan->accepted = plan->stopped ? i + 1 : i;
  plan->row = plan->stopped ? -1 : start + i;
  plan->draw = 2 * i + 1;
  return true;
}

// The writes of a planned request: the accepted drafts, then (unless a draft
// stopped it) `token`, sampled from plan.row; accept_num.
FD_HOST_DEVICE inline void verify_rejection_write(const SpeculateVerifyParams& p, int64_t b,
                                                  const VerifyPlan& plan, int64_t token) {
  const int64_t* draft = p.draft_tokens + b * p.draft_cols;
  for (int64_t k = 0; k < plan.accepted; ++k) verify_emit(p, b, k, draft[k + 1]);
  if (!plan.stopped) {
    if (p.prefill_one_step_stop) p.stop_flags[b] = true;
    verify_emit(p, b, plan.accepted, token);
  }
  p.accept_num[b] = static_cast<int32_t>(plan.stopped ? plan.accepted : plan.accepted + 1);
}

// ---- checks ----------------------------------------------------------------------------------

// The per-request checks but the full-row scan of kVerifyRejection. Returns
// true when request b runs under kVerifyRejection with no problem so far and
// samples a row: then *plan says which and the caller scans that row (and the
// draft row for a residual with draft_probs) for NaN / inf.
FD_HOST_DEVICE inline bool speculate_verify_check_request(const SpeculateVerifyParams& p, int64_t b,
                                                          KernelStatus* st, VerifyPlan* plan) {
  if (p.is_block_step[b] || p.stop_flags[b]) return false;
  const int64_t used = verify_used(p, b);
  if (used > p.draft_cols) return report(st, kVerifyDraftWidth, b, used, p.draft_cols), false;
  if (used > p.accept_cols) return report(st, kVerifyAcceptWidth, b, used, p.accept_cols), false;
  const int64_t start = verify_start(p, b);
  if (start < 0) return report(st, kVerifyRowStart, b, start, 0), false;
  const int64_t last = start + used - 1;
  if (last >= p.verify_rows)
    return report(st, kVerifyRowsVerifyTokens, b, last, p.verify_rows), false;
  if (last >= p.score_rows)
    return report(st, kVerifyRowsVerifyScores, b, last, p.score_rows), false;
  if (last >= p.candidate_len_rows)
    return report(st, kVerifyRowsCandidateLen, b, last, p.candidate_len_rows), false;
  if (last >= p.sampled_rows) return report(st, kVerifyRowsSampled, b, last, p.sampled_rows), false;
  if (verify_uses_topp(p)) {
    if (!finite_f32(p.topp[b])) return report(st, kVerifyToppValue, b, 0, 0), false;
    if (!verify_check_finite(p.verify_scores, p.num_candidates, start, last, kVerifyScoresValue, b,
                             st))
      return false;
  }
  if (p.strategy != kVerifyRejection) return false;
  if (last >= p.target_rows)
    return report(st, kVerifyRowsTargetProbs, b, last, p.target_rows), false;
  if (p.draft_probs != nullptr && last >= p.draft_prob_rows)
    return report(st, kVerifyRowsDraftProbs, b, last, p.draft_prob_rows), false;
  const int64_t* draft = p.draft_tokens + b * p.draft_cols;
  for (int64_t i = 1; i < used; ++i)
    if (!in_range(draft[i], p.vocab))
      return report(st, kVerifyDraftId, b, draft[i], p.vocab), false;
  if (!verify_rejection_plan(p, b, plan, st)) return false;
  return plan->row >= 0;
}

// Whether the sampled row(s) of a plan include the draft_probs row.
FD_HOST_DEVICE inline bool verify_reads_draft_row(const SpeculateVerifyParams& p,
                                                  const VerifyPlan& plan) {
  return plan.draft >= 0 && p.draft_probs != nullptr;
}

// Every check of request b, in one thread (the CPU driver; the CUDA kernel of
// the other strategies).
FD_HOST_DEVICE inline void speculate_verify_check(const SpeculateVerifyParams& p, int64_t b,
                                                  KernelStatus* st) {
  VerifyPlan plan;
  if (!speculate_verify_check_request(p, b, st, &plan)) return;
  if (!verify_check_finite(p.target_probs, p.vocab, plan.row, plan.row, kVerifyTargetProbsValue, b,
                           st))
    return;
  if (verify_reads_draft_row(p, plan))
    verify_check_finite(p.draft_probs, p.vocab, plan.row, plan.row, kVerifyDraftProbsValue, b, st);
}

// ---- apply -----------------------------------------------------------------------------------

// Every strategy but kVerifyRejection (one thread per request).
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
    int64_t token;
    switch (p.strategy) {
      case kVerifyTargetMatch:
        token = p.sampled_token_ids[row];
        break;
      case kVerifyGreedy:
        token = p.verify_tokens[row * C];
        break;
      default:  // kVerifyTopP, kVerifyTopK
        token = p.enable_topp ? verify_topp(p, b, row) : p.verify_tokens[row * C];
    }
    if (p.prefill_one_step_stop) p.stop_flags[b] = true;
    verify_emit(p, b, i, token);
  }
  p.accept_num[b] = static_cast<int32_t>(acc);
}

// ---- CPU driver --------------------------------------------------------------------------------

// The 32 lane sums of chunk c (steps outer, lanes inner: the same adds per
// lane as verify_lane_sum, in loops the compiler vectorises: 32 independent
// accumulators); *bad |= some value read is NaN or inf (x * 0 is NaN exactly
// then; the lanes of chk stay 0 otherwise).
inline void verify_chunk_lanes_cpu(const SpeculateVerifyParams& p, int64_t row, int64_t c,
                                   bool residual, int64_t draft, float* lanes, bool* bad) {
  const float* prow = p.target_probs + row * p.vocab;
  const float* qrow =
      residual && p.draft_probs != nullptr ? p.draft_probs + row * p.vocab : nullptr;
  float acc[kVerifyLanes], chk[kVerifyLanes];
  for (int64_t l = 0; l < kVerifyLanes; ++l) acc[l] = chk[l] = 0.f;
  for (int64_t j = 0; j < kVerifySteps; ++j) {
    const int64_t base = c * kVerifyChunk + j * kVerifyLanes;
    if (base >= p.vocab) break;
    const float* x = prow + base;
    if (p.vocab - base >= kVerifyLanes) {  // a whole step: a fixed trip count
      if (qrow != nullptr) {
        const float* y = qrow + base;
        for (int64_t l = 0; l < kVerifyLanes; ++l) {
          chk[l] += x[l] * 0.f + y[l] * 0.f;
          const float r = x[l] - y[l];
          acc[l] += r > 0.f ? r : 0.f;
        }
      } else {
        for (int64_t l = 0; l < kVerifyLanes; ++l) {
          chk[l] += x[l] * 0.f;
          acc[l] += x[l] > 0.f ? x[l] : 0.f;  // max(0, p - 0)
        }
      }
    } else {
      const int64_t m = p.vocab - base;
      for (int64_t l = 0; l < m; ++l) {
        const float y = qrow != nullptr ? qrow[base + l] : 0.f;
        chk[l] += x[l] * 0.f + y * 0.f;
        const float r = x[l] - y;
        acc[l] += r > 0.f ? r : 0.f;
      }
    }
  }
  bool nonfinite = false;
  for (int64_t l = 0; l < kVerifyLanes; ++l) {
    lanes[l] = acc[l];
    nonfinite |= chk[l] != 0.f;  // NaN != 0
  }
  // A greedy drafter's residual (q one-hot on the draft): the draft's lane is
  // summed again in order with its weight max(0, p_d - 1).
  if (residual && qrow == nullptr && draft >= c * kVerifyChunk && draft < (c + 1) * kVerifyChunk)
    lanes[(draft - c * kVerifyChunk) % kVerifyLanes] =
        verify_lane_sum(p, row, c, (draft - c * kVerifyChunk) % kVerifyLanes, true, draft);
  *bad |= nonfinite;
}

// The sampled token of a plan (the blockwise inverse CDF of the file comment),
// reading each sampled row once; -1 with *bad set when a value it read is NaN
// or inf. sums: scratch of verify_num_chunks(vocab) floats.
inline int64_t verify_sample_cpu(const SpeculateVerifyParams& p, int64_t b, const VerifyPlan& plan,
                                 float* sums, bool* bad) {
  const bool residual = plan.draft >= 0;
  const int64_t chunks = verify_num_chunks(p.vocab);
  float lanes[kVerifyLanes];
  *bad = false;
  for (int64_t c = 0; c < chunks; ++c) {
    verify_chunk_lanes_cpu(p, plan.row, c, residual, plan.draft, lanes, bad);
    sums[c] = verify_chunk_sum(lanes);
  }
  if (*bad) return -1;
  const float total = verify_total(sums, chunks);
  if (total > 0.f) {
    const float t = verify_uniform(p, b, plan.draw) * total;
    float before = 0.f;
    const int64_t c = verify_find_chunk(sums, chunks, t, &before);
    if (c >= 0) {
      bool unused = false;
      verify_chunk_lanes_cpu(p, plan.row, c, residual, plan.draft, lanes, &unused);
      const int64_t v =
          verify_find_in_chunk(p, plan.row, c, lanes, before, t, residual, plan.draft);
      if (v >= 0) return v;
    }
  }
  return verify_argmax(p, plan.row);
}

// Checks every request, then applies; on bad input nothing is written. Under
// kVerifyRejection the check of a request samples its row in the same read
// (the NaN / inf scan) and keeps the token for the apply loop.
inline KernelStatus speculate_verify_cpu(const SpeculateVerifyParams& p) {
  KernelStatus st{};
  if (p.strategy != kVerifyRejection) {
    for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) speculate_verify_check(p, b, &st);
    if (st.code != 0) return st;
    for (int64_t b = 0; b < p.bsz; ++b) speculate_verify_apply(p, b);
    return st;
  }
  std::vector<float> sums(static_cast<size_t>(verify_num_chunks(p.vocab)) + 1);
  std::vector<int64_t> tokens(static_cast<size_t>(p.bsz > 0 ? p.bsz : 1), 0);
  for (int64_t b = 0; b < p.bsz; ++b) {
    VerifyPlan plan;
    if (!speculate_verify_check_request(p, b, &st, &plan)) {
      if (st.code != 0) return st;
      continue;
    }
    bool bad = false;
    tokens[b] = verify_sample_cpu(p, b, plan, sums.data(), &bad);
    if (bad) {  // name the first non-finite value: target row first, then draft row
      if (verify_check_finite(p.target_probs, p.vocab, plan.row, plan.row, kVerifyTargetProbsValue,
                              b, &st) &&
          verify_reads_draft_row(p, plan))
        verify_check_finite(p.draft_probs, p.vocab, plan.row, plan.row, kVerifyDraftProbsValue, b,
                            &st);
      return st;
    }
  }
  for (int64_t b = 0; b < p.bsz; ++b) {
    if (p.is_block_step[b] || p.stop_flags[b]) continue;
    VerifyPlan plan;
    verify_rejection_plan(p, b, &plan, nullptr);
    verify_rejection_write(p, b, plan, tokens[b]);
  }
  return st;
}

}  // namespace fd_mtp
