// Part of speculate_verify.h (included at its end; include that header, not
// this one): the per-request checks (every strategy; kVerifyRejection's
// through its plan) and the apply of every strategy but kVerifyRejection.
#pragma once

namespace fd_mtp {

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

}  // namespace fd_mtp
