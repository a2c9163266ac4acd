#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void draft_model_preprocess_check_kernel(DraftModelPreprocessParams p,
                                                    KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    draft_model_preprocess_check(p, b, status);
}

__global__ void draft_model_preprocess_apply_kernel(DraftModelPreprocessParams p,
                                                    const KernelStatus* status, int64_t* running) {
  if (status->code != 0) return;  // bad input: write nothing
  int64_t local = 0;
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    local += draft_model_preprocess_apply(p, b);
  block_add(local, running);
}

cudaError_t draft_model_preprocess_cuda(const DraftModelPreprocessParams& p, KernelStatus* status,
                                        int64_t* running, cudaStream_t stream) {
  cudaError_t err = reset_status(status, running, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  const unsigned grid = grid_for(p.bsz);
  draft_model_preprocess_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  draft_model_preprocess_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status, running);
  return cudaGetLastError();
}

}  // namespace fd_mtp
