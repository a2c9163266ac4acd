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
};

// current <- preset, count <- 0 (one kernel of one thread).
cudaError_t stream_status_begin(StreamStatus* s, cudaStream_t stream);
// Moves a real error of `current` into `pending` (the first one only) and poisons the stream.
cudaError_t stream_status_commit(StreamStatus* s, int32_t op, cudaStream_t stream);
// The same for a per-call status slot (the hand-written bindings' ops in deferred mode).
cudaError_t stream_status_commit_slot(StreamStatus* s, const KernelStatus* slot, int32_t op,
                                      cudaStream_t stream);
// Copies the stream's preset (zero, or poisoned) into `status`: a per-call status slot then
// makes its op skip on a poisoned stream as the persistent slot does.
cudaError_t stream_status_preset(const StreamStatus* s, KernelStatus* status, cudaStream_t stream);
// Zeroes pending and preset: the stream runs ops again (after the host read the error).
cudaError_t stream_status_clear(StreamStatus* s, cudaStream_t stream);

}  // namespace fd_mtp
