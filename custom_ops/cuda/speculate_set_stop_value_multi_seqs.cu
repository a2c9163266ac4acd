#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void set_stop_value_check_kernel(SetStopValueParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bs; b += global_stride())
    set_stop_value_check(p, b, status);
}

// One thread per request walks all of the request's stop sequences, so the
// earliest hit wins deterministically (no race between stop sequences).
__global__ void set_stop_value_apply_kernel(SetStopValueParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bs; b += global_stride()) set_stop_value_apply(p, b);
}

cudaError_t speculate_set_stop_value_multi_seqs_cuda(const SetStopValueParams& p,
                                                     KernelStatus* status, cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bs == 0) return err;
  const unsigned grid = grid_for(p.bs);
  set_stop_value_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  set_stop_value_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
