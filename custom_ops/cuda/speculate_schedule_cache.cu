#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void schedule_cache_check_kernel(ScheduleCacheParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    schedule_cache_check(p, b, status);
}

__global__ void schedule_cache_apply_kernel(ScheduleCacheParams p, const KernelStatus* status,
                                            int64_t* stopped) {
  if (status->code != 0) return;  // bad input: write nothing
  int64_t local = 0;
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    local += schedule_cache_apply(p, b);
  block_add(local, stopped);
}

cudaError_t speculate_schedule_cache_cuda(const ScheduleCacheParams& p, KernelStatus* status,
                                          int64_t* stopped, cudaStream_t stream) {
  cudaError_t err = reset_status(status, stopped, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  const unsigned grid = grid_for(p.bsz);
  schedule_cache_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  schedule_cache_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status, stopped);
  return cudaGetLastError();
}

}  // namespace fd_mtp
