// speculate_update_input_ids_cpu (spec §5.16): a host op that copies a new
// task's prompt ids into the flat input_ids_cpu buffer at bid * max_seq_len
// (the n-gram drafter's haystack). No CUDA launcher: the buffer lives on the CPU.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

enum UpdateInputIdsStatus : int32_t {
  kUpdateInputIdsRange = 1,  // the copy would leave input_ids_cpu
};

struct UpdateInputIdsParams {
  int64_t* input_ids_cpu;  // flat view, written
  int64_t numel;
  const int64_t* task_input_ids;  // [task_len]
  int64_t task_len;
  int64_t bid;
  int64_t max_seq_len;
};

inline KernelStatus update_input_ids_cpu(const UpdateInputIdsParams& p) {
  KernelStatus st{};
  if (p.task_len == 0) return st;
  // bid >= 0 and max_seq_len >= 0 are attribute ranges; both < 2^31, so no overflow here.
  const int64_t first = p.bid * p.max_seq_len;
  if (first + p.task_len > p.numel) {
    report(&st, kUpdateInputIdsRange, -1, first + p.task_len, p.numel);
    return st;
  }
  for (int64_t i = 0; i < p.task_len; ++i) p.input_ids_cpu[first + i] = p.task_input_ids[i];
  return st;
}

}  // namespace fd_mtp
