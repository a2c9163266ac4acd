// speculate_calcu_accept_ratio (spec §5.16): adds this step's drafted and
// accepted token counts to two running totals, from which a server reports its
// acceptance ratio (sum_accept_num / sum_draft_num).
//
// A request counts when it verified drafts this step (seq_lens_decoder > 0 and
// seq_lens_this_time != seq_lens_decoder: drafts this_time - 1, accepted
// accept_nums - 1, the bonus token not counted) or when it stopped this step
// (seq_lens_this_time > 0 and stop_flags: drafts this_time - 1, accepted
// accept_nums). The totals change only when the step's draft count is not zero
// (upstream's rule), and never past int32.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum AcceptRatioStatus : int32_t {
  kAcceptRatioDraftOverflow = 1,   // sum_draft_num would leave int32
  kAcceptRatioAcceptOverflow = 2,  // sum_accept_num would leave int32
};

struct AcceptRatioParams {
  int32_t* sum_draft_num;   // [1], written
  int32_t* sum_accept_num;  // [1], written
  const int32_t* accept_nums;
  const int32_t* seq_lens_this_time;  // [bsz]
  const int32_t* seq_lens_decoder;
  const bool* stop_flags;
  int64_t bsz;
};

// Request b's contribution: (drafted, accepted) tokens, both 0 when it does not count.
FD_HOST_DEVICE inline void accept_ratio_counts(const AcceptRatioParams& p, int64_t b,
                                               int64_t* drafted, int64_t* accepted) {
  const int64_t this_time = p.seq_lens_this_time[b];
  const int64_t dec = p.seq_lens_decoder[b];
  *drafted = 0;
  *accepted = 0;
  if (dec > 0 && this_time != dec) {
    *drafted = this_time - 1;
    *accepted = static_cast<int64_t>(p.accept_nums[b]) - 1;
  } else if (this_time > 0 && p.stop_flags[b]) {
    *drafted = this_time - 1;
    *accepted = p.accept_nums[b];
  }
}

// Adds the batch's sums to the totals, or reports the total that would leave
// int32 (nothing written then).
FD_HOST_DEVICE inline void accept_ratio_commit(const AcceptRatioParams& p, int64_t drafted,
                                               int64_t accepted, KernelStatus* st) {
  if (drafted == 0) return;
  const int64_t draft_total = static_cast<int64_t>(*p.sum_draft_num) + drafted;
  const int64_t accept_total = static_cast<int64_t>(*p.sum_accept_num) + accepted;
  if (draft_total < INT32_MIN || draft_total > INT32_MAX) {
    report(st, kAcceptRatioDraftOverflow, -1, draft_total, INT32_MAX);
    return;
  }
  if (accept_total < INT32_MIN || accept_total > INT32_MAX) {
    report(st, kAcceptRatioAcceptOverflow, -1, accept_total, INT32_MAX);
    return;
  }
  *p.sum_draft_num = static_cast<int32_t>(draft_total);
  *p.sum_accept_num = static_cast<int32_t>(accept_total);
}

inline KernelStatus calcu_accept_ratio_cpu(const AcceptRatioParams& p) {
  KernelStatus st{};
  int64_t drafted = 0, accepted = 0;
  for (int64_t b = 0; b < p.bsz; ++b) {
    int64_t d = 0, a = 0;
    accept_ratio_counts(p, b, &d, &a);
    drafted += d;
    accepted += a;
  }
  accept_ratio_commit(p, drafted, accepted, &st);
  return st;
}

}  // namespace fd_mtp
