// eagle_get_hidden_states (spec §6.2) and eagle_get_self_hidden_states (§6.4):
// gather the hidden-state rows the draft model consumes next.
//
// Both ops walk the requests in order; request b consumes `in_rows` rows of
// the packed input and emits `out_rows` of them, starting at its row
// `first_src`. A plan per request is computed by shared code; the CPU driver
// and the CUDA kernels then prefix-sum the plans and copy rows. The output's
// row count is data (fd_mtp/schema: Rows): `<op>_rows_cpu` counts and checks,
// then `<op>_cpu` copies into `out` ([out_rows, row_bytes]).
#pragma once

#include <cstring>

#include "common.h"

namespace fd_mtp {

struct RowPlan {
  int64_t in_rows;
  int64_t out_rows;
  int64_t first_src;  // first emitted row, relative to the request's first input row
};

enum EagleStatus : int32_t {
  kEagleInputRows = 1,
  kEagleAcceptNums = 2,
  kEagleLastSeqLens = 3,
  kEagleNegativeCount = 4,
};

struct EagleHiddenStatesParams {
  const int32_t* seq_lens_this_time;  // draft, after draft_model_preprocess
  const int32_t* seq_lens_encoder;    // draft
  const int32_t* accept_nums;         // target
  const int32_t* base_model_seq_lens_this_time;
  int64_t bsz;
  // The gather (the same fields in both ops' Params):
  const void* input;         // [input_rows, row_bytes]
  int64_t input_rows;        // T
  int64_t row_bytes;         // H * itemsize
  int64_t* src_rows;         // GPU workspace [max(input_rows, 1)]: the source of each output row
  int64_t out_rows;          // the count (the capacity when padded)
  void* out;                 // [out_rows, row_bytes], written
  const int64_t* live_rows;  // padded (fd_mtp.cuda): the count on the device, rows past it zero
};

FD_HOST_DEVICE inline RowPlan eagle_hidden_states_plan(const EagleHiddenStatesParams& p, int64_t b,
                                                       KernelStatus* st) {
  const int32_t enc = p.seq_lens_encoder[b];
  const int32_t this_time = p.seq_lens_this_time[b];
  const int32_t base_this_time = p.base_model_seq_lens_this_time[b];
  if (enc > 0) return RowPlan{enc, enc, 0};  // prefill: every row, one to one
  if (base_this_time < 0) {
    report(st, kEagleNegativeCount, b, base_this_time, 0);
    return RowPlan{0, 0, 0};
  }
  if (this_time == 0) return RowPlan{base_this_time, 0, 0};  // skip (or nothing)
  const int32_t acc = p.accept_nums[b];                      // decode: the accepted rows
  if (acc < 0 || acc > base_this_time) {
    report(st, kEagleAcceptNums, b, acc, base_this_time);
    return RowPlan{0, 0, 0};
  }
  return RowPlan{base_this_time, acc, 0};
}

struct EagleSelfHiddenStatesParams {
  const int32_t* last_seq_lens_this_time;  // this_time before the substep
  const int32_t* seq_lens_this_time;       // after draft_model_update
  const int64_t* step_idx;                 // after draft_model_update
  int64_t bsz;
  // The gather (the same fields in both ops' Params):
  const void* input;         // [input_rows, row_bytes]
  int64_t input_rows;        // T
  int64_t row_bytes;         // H * itemsize
  int64_t* src_rows;         // GPU workspace [max(input_rows, 1)]: the source of each output row
  int64_t out_rows;          // the count (the capacity when padded)
  void* out;                 // [out_rows, row_bytes], written
  const int64_t* live_rows;  // padded (fd_mtp.cuda): the count on the device, rows past it zero
};

FD_HOST_DEVICE inline RowPlan eagle_self_hidden_states_plan(const EagleSelfHiddenStatesParams& p,
                                                            int64_t b, KernelStatus* st) {
  const int32_t q = p.seq_lens_this_time[b];
  const int32_t q_last = p.last_seq_lens_this_time[b];
  const bool from_prefill = p.step_idx[b] == 1;  // its single output row
  if (q_last < 0) {
    report(st, kEagleNegativeCount, b, q_last, 0);
    return RowPlan{0, 0, 0};
  }
  if (q > 0) {
    if (from_prefill) return RowPlan{1, 1, 0};
    if (q_last == 0) {
      report(st, kEagleLastSeqLens, b, q_last, 1);
      return RowPlan{0, 0, 0};
    }
    return RowPlan{q_last, 1, q_last - 1};  // decode: the request's last row
  }
  if (from_prefill) return RowPlan{q_last > 0 ? 1 : 0, 0, 0};  // stopped
  return RowPlan{q_last, 0, 0};
}

// CPU: validate every plan and count output rows. Returns the status; on
// success *out_rows is the number of output rows.
template <typename Params, typename PlanFn>
inline KernelStatus row_gather_count_cpu(const Params& p, PlanFn plan, int64_t* out_rows) {
  KernelStatus st{};
  int64_t in = 0, out = 0;
  for (int64_t b = 0; b < p.bsz && st.code == 0; ++b) {
    const RowPlan r = plan(p, b, &st);
    in += r.in_rows;
    out += r.out_rows;
  }
  if (st.code == 0 && in > p.input_rows) report(&st, kEagleInputRows, -1, in, p.input_rows);
  *out_rows = out;
  return st;
}

// CPU: copy the planned rows (row_bytes each) from `input` to `out`.
// Call after row_gather_count_cpu succeeded.
template <typename Params, typename PlanFn>
inline void row_gather_copy_cpu(const Params& p, PlanFn plan) {
  KernelStatus unused{};
  const char* src = static_cast<const char*>(p.input);
  char* dst = static_cast<char*>(p.out);
  int64_t in = 0, out = 0;
  for (int64_t b = 0; b < p.bsz; ++b) {
    const RowPlan r = plan(p, b, &unused);
    if (r.out_rows > 0 && p.row_bytes > 0) {
      std::memcpy(dst + out * p.row_bytes, src + (in + r.first_src) * p.row_bytes,
                  static_cast<size_t>(r.out_rows * p.row_bytes));
    }
    in += r.in_rows;
    out += r.out_rows;
  }
}

// The CPU drivers of the two ops (fd_mtp/schema/draft.py: rows, then the copy).
inline KernelStatus eagle_get_hidden_states_rows_cpu(const EagleHiddenStatesParams& p,
                                                     int64_t* rows) {
  return row_gather_count_cpu(p, eagle_hidden_states_plan, rows);
}
inline void eagle_get_hidden_states_cpu(const EagleHiddenStatesParams& p) {
  row_gather_copy_cpu(p, eagle_hidden_states_plan);
}
inline KernelStatus eagle_get_self_hidden_states_rows_cpu(const EagleSelfHiddenStatesParams& p,
                                                          int64_t* rows) {
  return row_gather_count_cpu(p, eagle_self_hidden_states_plan, rows);
}
inline void eagle_get_self_hidden_states_cpu(const EagleSelfHiddenStatesParams& p) {
  row_gather_copy_cpu(p, eagle_self_hidden_states_plan);
}

}  // namespace fd_mtp
