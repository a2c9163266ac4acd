#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void draft_model_postprocess_kernel(DraftModelPostprocessParams p) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    draft_model_postprocess_request(p, b);
}

cudaError_t draft_model_postprocess_cuda(const DraftModelPostprocessParams& p,
                                         cudaStream_t stream) {
  if (p.bsz == 0) return cudaSuccess;
  draft_model_postprocess_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fd_mtp
