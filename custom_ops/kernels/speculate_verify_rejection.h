// Part of speculate_verify.h (included at its end; include that header, not
// this one): kVerifyRejection's blockwise sampling sums, as defined in
// speculate_verify.h's file comment, the argmax fallback, and the plan of a
// request (its accept walk, what it reads) and the plan's writes.
#pragma once

namespace fd_mtp {

// ---- kVerifyRejection: blockwise sampling sums (see speculate_verify.h) -----------------------

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

}  // namespace fd_mtp
