// ngram_match (spec §5.17) and hybrid_mtp_ngram (spec §6.7): propose draft
// tokens by finding the request's last n tokens earlier in its prompt or in
// its generated tokens and copying what followed them.
//
// Both ops share one algorithm, switched by NgramParams::hybrid:
//
// 1. Plan (per request, independent): does the request draft, with which
//    token count `base` before the search (1, or the MTP count q0 for the
//    hybrid op) and which untrimmed query length q.
// 2. Search (per request, independent): the first usable match in FastDeploy's
//    order: n from max_ngram_size down to min_ngram_size, for each n the prompt
//    windows then the generated windows, earliest window first; a window whose
//    continuation is empty (s >= e) is skipped. For q >= 1, e = min(s + q, len)
//    so "usable" means s < len and does not depend on q: the search can run
//    before the budget pass, in parallel over requests.
//    Instead of one scan per n we compute, for every haystack position t, the
//    length m(t) of the longest suffix of the query ending at t (capped at
//    min(max_ngram_size, step_idx)). The window of size n ending at t matches
//    iff m(t) >= n, so FastDeploy's first match is the position with the
//    largest m(t) and, among those, the smallest u (prompt positions first,
//    then generated ones): one pass, one min-reduction, identical result.
// 3. Budget (sequential over requests, integer bookkeeping only): the token
//    threshold, the count of requests still to come and the running sum of
//    seq_lens_this_time (which includes the drafts granted to earlier
//    requests) trim q; the request then copies min(q, len - s) tokens.
//
// The CPU driver runs 1-3 request by request (searching only when the budget
// leaves q >= 1); the CUDA path runs 2 with one block per request and 3 in a
// single block (see custom_ops/cuda/ngram.cu). Both call the functions below.
#pragma once

#include "common.h"

namespace fd_mtp {

enum NgramStatus : int32_t {
  kNgramInputIdsLen = 1,      // input_ids_len outside [0, input_ids columns]
  kNgramStepIdx = 2,          // step_idx >= pre_ids columns
  kNgramDraftTokensCols = 3,  // the copy could run past the draft_tokens row
  kNgramThisTime = 4,         // hybrid: negative seq_lens_this_time
};

struct NgramParams {
  const int64_t* input_ids;  // [>=bsz, input_ids_cols]: the prompt haystack
  int64_t input_ids_cols;
  const int64_t* input_ids_len;  // [>=bsz]
  const int64_t* pre_ids;        // [>=bsz, pre_ids_cols]: generated tokens (and the query)
  int64_t pre_ids_cols;
  const int64_t* step_idx;         // [>=bsz]
  const int32_t* draft_token_num;  // [>=bsz] (ngram_match only; unused by hybrid)
  int64_t* draft_tokens;           // [>=bsz, draft_tokens_cols], written
  int64_t draft_tokens_cols;
  int32_t* seq_lens_this_time;      // [bsz], written
  const int32_t* seq_lens_encoder;  // [>=bsz] (ngram_match only)
  const int32_t* seq_lens_decoder;  // [>=bsz]
  const int64_t* max_dec_len;       // [>=bsz]
  int64_t bsz;
  int32_t max_ngram_size;    // >= 1
  int32_t min_ngram_size;    // 1 <= min <= max (ngram_match: 1)
  int32_t max_draft_tokens;  // hybrid: K (ngram_match: ignored, as upstream)
  int32_t threshold;         // token budget of the batch
  bool hybrid;
  int64_t* hits;  // workspace [max(bsz, 1)] of the CUDA launcher (the CPU driver does not use it)
};

enum NgramKind : int32_t {
  kNgramKeep = 0,   // untouched (prefill, or a hybrid request that cannot draft)
  kNgramIdle = 1,   // ngram_match empty slot: seq_lens_this_time := 0
  kNgramDraft = 2,  // goes through the budget and the search
};

struct NgramPlan {
  int32_t kind;
  int64_t base;  // seq_lens_this_time before the search (1, or q0 for hybrid)
  int64_t q;     // tokens it may draft before the budget trims it
};

FD_HOST_DEVICE inline int64_t ngram_min(int64_t a, int64_t b) { return a < b ? a : b; }

// max_dec_len - step_idx - 1 without overflow (both are arbitrary int64): the
// exact value clamped to [INT64_MIN, INT64_MAX]. Only its minimum with a small
// count and its sign are used, so the clamp gives the exact result.
FD_HOST_DEVICE inline int64_t ngram_tokens_left(int64_t max_dec_len, int64_t step_idx) {
  constexpr int64_t kMax = INT64_MAX, kMin = INT64_MIN;
  int64_t d;
  if (step_idx > 0 && max_dec_len < kMin + step_idx)
    d = kMin;
  else if (step_idx < 0 && max_dec_len > kMax + step_idx)
    d = kMax;
  else
    d = max_dec_len - step_idx;
  return d == kMin ? kMin : d - 1;
}

FD_HOST_DEVICE inline NgramPlan ngram_plan(const NgramParams& p, int64_t b) {
  const int64_t left = ngram_tokens_left(p.max_dec_len[b], p.step_idx[b]);
  if (!p.hybrid) {
    const int64_t q = ngram_min(p.draft_token_num[b], left);
    if (p.seq_lens_encoder[b] > 0) return {kNgramKeep, p.seq_lens_this_time[b], q};
    if (p.seq_lens_decoder[b] == 0) return {kNgramIdle, 0, q};
    return {kNgramDraft, 1, q};
  }
  const int64_t q0 = p.seq_lens_this_time[b];
  const int64_t q = ngram_min(static_cast<int64_t>(p.max_draft_tokens) - q0 + 1, left);
  if (q0 == 0 || q <= 0) return {kNgramKeep, q0, q};
  return {kNgramDraft, q0, q};
}

// Whether request b counts in the initial "requests still to come" number.
FD_HOST_DEVICE inline int64_t ngram_counts_as_remaining(const NgramParams& p, int64_t b) {
  if (p.hybrid) return p.seq_lens_decoder[b] > 0;
  return p.seq_lens_encoder[b] > 0 || p.seq_lens_decoder[b] > 0;
}

// The largest n the search can use for request b (0: it cannot search).
FD_HOST_DEVICE inline int32_t ngram_cap(const NgramParams& p, int64_t b) {
  const int64_t step = p.step_idx[b];
  const int64_t cap = step < p.max_ngram_size ? step : p.max_ngram_size;
  return cap >= p.min_ngram_size ? static_cast<int32_t>(cap) : 0;
}

// Requests whose rows are read (and so validated): drafting with q >= 1.
FD_HOST_DEVICE inline bool ngram_searches(const NgramPlan& plan) {
  return plan.kind == kNgramDraft && plan.q >= 1;
}

FD_HOST_DEVICE inline void ngram_check(const NgramParams& p, int64_t b, KernelStatus* st) {
  const NgramPlan plan = ngram_plan(p, b);
  if (!ngram_searches(plan)) return;
  if (plan.base < 1) {  // hybrid only: a negative count would copy before the row
    report(st, kNgramThisTime, b, plan.base, 0);
    return;
  }
  // Columns [base, base + q) may be written; the budget only shrinks q.
  if (plan.base + plan.q > p.draft_tokens_cols) {
    report(st, kNgramDraftTokensCols, b, plan.base + plan.q, p.draft_tokens_cols);
    return;
  }
  if (ngram_cap(p, b) == 0) return;  // nothing is read
  const int64_t len = p.input_ids_len[b];
  if (len < 0 || len > p.input_ids_cols) {
    report(st, kNgramInputIdsLen, b, len, p.input_ids_cols);
    return;
  }
  if (p.step_idx[b] >= p.pre_ids_cols) report(st, kNgramStepIdx, b, p.step_idx[b], p.pre_ids_cols);
}

// The sequential budget of one drafting request: updates *remaining and
// returns how many tokens it may draft (<= 0: none). sum_before = Σ_{j<b} of
// the (already updated) seq_lens_this_time.
FD_HOST_DEVICE inline int64_t ngram_budget(const NgramParams& p, const NgramPlan& plan,
                                           int64_t sum_before, int64_t* remaining) {
  *remaining -= 1;
  const int64_t sum = sum_before + plan.base;
  const int64_t threshold = p.threshold;
  int64_t q = plan.q;
  if (sum + q + *remaining > threshold) q = ngram_min(q, threshold - sum - *remaining);
  if (sum + *remaining >= threshold - 1) return 0;
  return q;
}

// ---------------------------------------------------------------- search ---
// Search positions of request b: u in [0, prompt) are prompt positions
// t = u (t <= input_ids_len - 2, so that s = t + 1 < input_ids_len), u in
// [prompt, prompt + generated) are pre_ids positions t = u - prompt
// (t <= step_idx - 2). t is the last token of a candidate window.
struct NgramDomain {
  int64_t prompt;
  int64_t generated;
};

FD_HOST_DEVICE inline NgramDomain ngram_domain(const NgramParams& p, int64_t b) {
  const int64_t len = p.input_ids_len[b];
  const int64_t step = p.step_idx[b];
  return {len > 1 ? len - 1 : 0, step > 1 ? step - 1 : 0};
}

// A candidate match: n = window size (0: none), u = search position.
struct NgramCandidate {
  int32_t n;
  int64_t u;
};

FD_HOST_DEVICE inline NgramCandidate ngram_no_candidate() { return {0, INT64_MAX}; }

// FastDeploy's preference: larger n, then earlier position.
FD_HOST_DEVICE inline bool ngram_better(const NgramCandidate& a, const NgramCandidate& b) {
  return a.n > b.n || (a.n == b.n && a.u < b.u);
}

struct NgramBest {
  FD_HOST_DEVICE NgramCandidate operator()(const NgramCandidate& a, const NgramCandidate& b) const {
    return ngram_better(b, a) ? b : a;
  }
};

// The candidate at search position u of request b (n = 0 when none): the
// longest suffix of the query pre_ids[b, step-cap+1 .. step] that ends at
// position t of its haystack, if it is at least min_ngram_size long.
FD_HOST_DEVICE inline NgramCandidate ngram_candidate_at(const NgramParams& p, int64_t b,
                                                        const NgramDomain& d, int32_t cap,
                                                        int64_t u) {
  const int64_t* pre_row = p.pre_ids + b * p.pre_ids_cols;
  const int64_t* hay;
  int64_t t;
  if (u < d.prompt) {
    hay = p.input_ids + b * p.input_ids_cols;
    t = u;
  } else {
    hay = pre_row;
    t = u - d.prompt;
  }
  const int64_t step = p.step_idx[b];
  const int64_t lim = t + 1 < cap ? t + 1 : cap;
  int32_t k = 0;
  while (k < lim && hay[t - k] == pre_row[step - k]) ++k;
  if (k < p.min_ngram_size) return ngram_no_candidate();
  return {k, u};
}

// Where a found candidate's continuation starts and how many tokens follow it.
struct NgramHit {
  const int64_t* src;  // first token to copy
  int64_t avail;       // tokens available after the window (>= 1)
};

FD_HOST_DEVICE inline NgramHit ngram_hit(const NgramParams& p, int64_t b, const NgramDomain& d,
                                         int64_t u) {
  if (u < d.prompt)
    return {p.input_ids + b * p.input_ids_cols + u + 1, p.input_ids_len[b] - (u + 1)};
  const int64_t t = u - d.prompt;
  return {p.pre_ids + b * p.pre_ids_cols + t + 1, p.step_idx[b] - (t + 1)};
}

// Copies `count` drafts of request b after its first `base` entries.
FD_HOST_DEVICE inline void ngram_copy(const NgramParams& p, int64_t b, int64_t base,
                                      const int64_t* src, int64_t count) {
  int64_t* dst = p.draft_tokens + b * p.draft_tokens_cols + base;
  for (int64_t i = 0; i < count; ++i) dst[i] = src[i];
}

// ------------------------------------------------------------ CPU driver ---
// First index i in [from, to) with hay[i] == token, else `to`. Chunks of 8
// compared without branches (vectorisable), then the exact index.
inline int64_t ngram_find(const int64_t* hay, int64_t from, int64_t to, int64_t token) {
  int64_t i = from;
  for (; i + 8 <= to; i += 8) {
    int hit = 0;
    for (int j = 0; j < 8; ++j) hit |= hay[i + j] == token;
    if (hit) break;
  }
  while (i < to && hay[i] != token) ++i;
  return i;
}

// Sequential scan with an early exit: positions are visited in preference
// order, so the first one reaching the cap wins. A position is a candidate
// only if its token equals the query's last token, so the scan jumps between
// such positions and evaluates them with the shared ngram_candidate_at.
inline NgramCandidate ngram_search_cpu(const NgramParams& p, int64_t b) {
  NgramCandidate best = ngram_no_candidate();
  const int32_t cap = ngram_cap(p, b);
  if (cap == 0) return best;
  const NgramDomain d = ngram_domain(p, b);
  const int64_t* pre_row = p.pre_ids + b * p.pre_ids_cols;
  const int64_t last = pre_row[p.step_idx[b]];
  const int64_t* hays[2] = {p.input_ids + b * p.input_ids_cols, pre_row};
  const int64_t sizes[2] = {d.prompt, d.generated};
  int64_t offset = 0;  // search position u of hays[src][0]
  for (int src = 0; src < 2; ++src) {
    for (int64_t t = ngram_find(hays[src], 0, sizes[src], last); t < sizes[src];
         t = ngram_find(hays[src], t + 1, sizes[src], last)) {
      const NgramCandidate c = ngram_candidate_at(p, b, d, cap, offset + t);
      if (ngram_better(c, best)) {
        best = c;
        if (best.n == cap) return best;
      }
    }
    offset += sizes[src];
  }
  return best;
}

inline KernelStatus ngram_cpu(const NgramParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) ngram_check(p, b, &st);
  if (st.code != 0) return st;
  int64_t remaining = 0;
  for (int64_t b = 0; b < p.bsz; ++b) remaining += ngram_counts_as_remaining(p, b);
  int64_t sum = 0;  // Σ seq_lens_this_time of the requests before b
  for (int64_t b = 0; b < p.bsz; ++b) {
    const NgramPlan plan = ngram_plan(p, b);
    int64_t this_time = plan.base;
    if (plan.kind == kNgramDraft) {
      const int64_t q = ngram_budget(p, plan, sum, &remaining);
      if (q >= 1) {
        const NgramCandidate c = ngram_search_cpu(p, b);
        if (c.n > 0) {
          const NgramHit hit = ngram_hit(p, b, ngram_domain(p, b), c.u);
          const int64_t count = ngram_min(q, hit.avail);
          ngram_copy(p, b, plan.base, hit.src, count);
          this_time += count;
        }
      }
    }
    if (plan.kind != kNgramKeep) p.seq_lens_this_time[b] = static_cast<int32_t>(this_time);
    sum += this_time;
  }
  return st;
}

}  // namespace fd_mtp
