#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void speculate_update_check_kernel(SpeculateUpdateParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.real_bsz; b += global_stride())
    speculate_update_check(p, b, status);
}

__global__ void speculate_update_apply_kernel(SpeculateUpdateParams p, const KernelStatus* status,
                                              int64_t* stopped) {
  if (status->code != 0) return;  // bad input: write nothing
  int64_t local = 0;
  for (int64_t b = global_thread(); b < p.max_bsz; b += global_stride())
    local += speculate_update_apply(p, b);
  block_add(local, stopped);
}

cudaError_t speculate_update_cuda(const SpeculateUpdateParams& p, KernelStatus* status,
                                  int64_t* stopped, cudaStream_t stream) {
  cudaError_t err = reset_status(status, stopped, stream);
  if (err != cudaSuccess || p.max_bsz == 0) return err;
  const unsigned grid = grid_for(p.max_bsz);
  speculate_update_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  speculate_update_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status, stopped);
  return cudaGetLastError();
}

}  // namespace fd_mtp
