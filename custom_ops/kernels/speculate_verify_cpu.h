// Part of speculate_verify.h (included at its end; include that header, not
// this one): the CPU driver, checks of every request before any write, and
// kVerifyRejection's sampling over 32 lane accumulators.
#pragma once

#include <vector>

namespace fd_mtp {

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

// The sampled token of a plan (the blockwise inverse CDF of speculate_verify.h),
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
