// The error model of the GPU ops without a sync per op (docs/gpu_errors.md), framework-free:
// shared by the raw CUDA module (custom_ops/cuda_module) and the Paddle GPU branch.
//
// Every stream that runs fd_mtp ops owns one StreamStatus in device memory, allocated once. An op
// launch is bracketed by two tiny stream-ordered steps:
//
//   stream_status_begin   current <- preset (zero, or {kStatusPoisoned} once the stream is
//                         poisoned), count <- 0. The launcher's reset_status keeps a poisoned
//                         code, so the op's apply kernels (which write nothing while
//                         status->code != 0) skip on the device;
//   stream_status_commit  when `current` holds a real error and nothing is pending yet: pending
//                         <- current (with the op's id), preset <- {kStatusPoisoned} (sticky).
//
// The host reads `pending` only at a sync it already has (or check_pending) and raises the named
// error there; clearing it un-poisons the stream. No allocation and no sync per op.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>

#include "../kernels/common.h"

namespace fd_mtp {

struct StreamStatus {
  KernelStatus current;  // the status slot of the op being launched
  KernelStatus pending;  // the first error since the last check (code 0: none); .op names the op
  KernelStatus preset;   // what `current` starts as: all zero, or code kStatusPoisoned
  int64_t count;         // the counter of an op with a flag (reset by begin)
  int64_t committed;     // ops committed on this stream (a diagnostic)
  bool flag;             // the flag of the last op with a host flag (stream_flag's target)
};

// The comparison of a flag computed on the device (stream_flag); the order of
// fd_mtp.schema.FLAG_COMPARES.
enum FlagCompare : int32_t {
  kFlagLess = 0,
  kFlagLessEqual = 1,
  kFlagGreater = 2,
  kFlagGreaterEqual = 3,
  kFlagEqual = 4,
  kFlagNotEqual = 5,
};

// current <- preset, count <- 0 (one kernel of one thread).
cudaError_t stream_status_begin(StreamStatus* s, cudaStream_t stream);
// Moves a real error of `current` into `pending` (the first one only) and poisons the stream.
cudaError_t stream_status_commit(StreamStatus* s, int32_t op, cudaStream_t stream);
// Zeroes pending and preset: the stream runs ops again (after the host read the error).
cudaError_t stream_status_clear(StreamStatus* s, cudaStream_t stream);
// An op's flag on the device (fd_mtp.schema.device_flag: `count + offset <cmp> bound`), one
// kernel of one thread, stream-ordered after the op: *flag <- (*count + offset) cmp rhs, rhs =
// *bound_ptr (a one-element int64 tensor read on the device, e.g. stop_nums) when bound_ptr is
// not null, else `bound`. Left unchanged when status->code is nonzero (the op failed or was
// skipped on a poisoned stream). No sync, no allocation.
cudaError_t stream_flag(const KernelStatus* status, const int64_t* count, int64_t offset,
                        FlagCompare cmp, const int64_t* bound_ptr, int64_t bound, bool* flag,
                        cudaStream_t stream);

}  // namespace fd_mtp
