#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void draft_model_update_check_kernel(DraftModelUpdateParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    draft_model_update_check(p, b, status);
}

__global__ void draft_model_update_apply_kernel(DraftModelUpdateParams p,
                                                const KernelStatus* status, int64_t* stopped) {
  if (status->code != 0) return;  // bad input: write nothing
  int64_t local = 0;
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    local += draft_model_update_apply(p, b);
  block_add(local, stopped);
}

cudaError_t draft_model_update_cuda(const DraftModelUpdateParams& p, KernelStatus* status,
                                    int64_t* stopped, cudaStream_t stream) {
  cudaError_t err = reset_status(status, stopped, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  const unsigned grid = grid_for(p.bsz);
  draft_model_update_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  draft_model_update_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status, stopped);
  return cudaGetLastError();
}

}  // namespace fd_mtp
