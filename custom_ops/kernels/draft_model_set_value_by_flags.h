// draft_model_set_value_by_flags (spec §6.9): a running request writes the
// tokens it carries this step into its history and goes back to one token.
//
// For request b with seq_lens_this_time != 0 that is not stopped: on a decode
// step (step_idx > 1) the n = seq_lens_this_time tokens draft_tokens[b, 0..n-1]
// land in pre_ids_all[b, step_idx-n+1 .. step_idx] (the last at step_idx); on
// the first step (step_idx == 1) draft_tokens[b, 0] lands in pre_ids_all[b, 1];
// then seq_lens_this_time[b] = 1.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum DraftSetValueStatus : int32_t {
  kDraftSetValueDraftColumn = 1,   // seq_lens_this_time > draft_tokens' columns
  kDraftSetValuePreIdsColumn = 2,  // a written column outside pre_ids_all's row
};

struct DraftSetValueParams {
  const int64_t* draft_tokens;  // [>= bs, draft_tokens_cols]
  int64_t draft_tokens_cols;
  int64_t* pre_ids_all;  // [>= bs, pre_ids_cols], written
  int64_t pre_ids_cols;
  const bool* stop_flags;
  int32_t* seq_lens_this_time;  // [bs], written
  const int64_t* step_idx;
  int64_t bs;
};

FD_HOST_DEVICE inline bool draft_set_value_runs(const DraftSetValueParams& p, int64_t b) {
  return p.seq_lens_this_time[b] != 0 && !p.stop_flags[b];
}

FD_HOST_DEVICE inline void draft_set_value_check(const DraftSetValueParams& p, int64_t b,
                                                 KernelStatus* st) {
  if (!draft_set_value_runs(p, b)) return;
  const int64_t n = p.seq_lens_this_time[b];
  const int64_t step = p.step_idx[b];
  if (step > 1 && n > 0) {
    if (n > p.draft_tokens_cols) {
      report(st, kDraftSetValueDraftColumn, b, n, p.draft_tokens_cols);
    } else if (step >= p.pre_ids_cols) {
      report(st, kDraftSetValuePreIdsColumn, b, step, p.pre_ids_cols);
    } else if (step - n + 1 < 0) {
      report(st, kDraftSetValuePreIdsColumn, b, step - n + 1, p.pre_ids_cols);
    }
  } else if (step == 1 && p.pre_ids_cols < 2) {
    report(st, kDraftSetValuePreIdsColumn, b, 1, p.pre_ids_cols);
  }
}

FD_HOST_DEVICE inline void draft_set_value_apply(const DraftSetValueParams& p, int64_t b) {
  if (!draft_set_value_runs(p, b)) return;
  const int64_t n = p.seq_lens_this_time[b];
  const int64_t step = p.step_idx[b];
  int64_t* row = p.pre_ids_all + b * p.pre_ids_cols;
  const int64_t* draft = p.draft_tokens + b * p.draft_tokens_cols;
  if (step > 1) {
    for (int64_t i = 0; i < n; ++i) row[step - i] = draft[n - 1 - i];
  } else if (step == 1) {
    row[1] = draft[0];
  }
  p.seq_lens_this_time[b] = 1;
}

inline KernelStatus draft_set_value_cpu(const DraftSetValueParams& p) {
  KernelStatus st{};
  for (int64_t b = 0; b < p.bs && st.code == 0; ++b) draft_set_value_check(p, b, &st);
  if (st.code != 0) return st;
  for (int64_t b = 0; b < p.bs; ++b) draft_set_value_apply(p, b);
  return st;
}

}  // namespace fd_mtp
