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

}  // namespace fd_mtp

// The rest of the op, each part using the ones before it: kVerifyRejection's
// sampling sums and plan, the per-request checks and apply, the CPU driver.
#include "speculate_verify_rejection.h"
#include "speculate_verify_apply.h"
#include "speculate_verify_cpu.h"
