// draft_model_postprocess (spec §6.5): after the proposer's substeps, set the
// target's seq_lens_this_time to the number of tokens it must verify.
#pragma once

#include "common.h"

namespace fd_mtp {

struct DraftModelPostprocessParams {
  const int64_t* base_model_draft_tokens;  // [bsz, draft_cols]
  int64_t draft_cols;
  int32_t* base_model_seq_lens_this_time;  // [bsz], written
  const int32_t* base_model_seq_lens_encoder;
  const bool* base_model_stop_flags;
  int64_t bsz;
};

// One request. A running decode request verifies every entry of its draft row
// that is not -1 (the whole row, not a prefix); a stopped one verifies none;
// a prefilling one keeps its count.
FD_HOST_DEVICE inline void draft_model_postprocess_request(const DraftModelPostprocessParams& p,
                                                           int64_t b) {
  if (p.base_model_stop_flags[b]) {
    p.base_model_seq_lens_this_time[b] = 0;
    return;
  }
  if (p.base_model_seq_lens_encoder[b] != 0) return;
  const int64_t* row = p.base_model_draft_tokens + b * p.draft_cols;
  int32_t count = 0;
  for (int64_t i = 0; i < p.draft_cols; ++i) count += row[i] != -1;
  p.base_model_seq_lens_this_time[b] = count;
}

inline void draft_model_postprocess_cpu(const DraftModelPostprocessParams& p) {
  for (int64_t b = 0; b < p.bsz; ++b) draft_model_postprocess_request(p, b);
}

}  // namespace fd_mtp
