#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

// `preset`: the stream's preset status (null: always runs); on a poisoned stream (code nonzero)
// the op writes nothing, as the ops with statuses (docs/gpu_errors.md).
__global__ void draft_model_postprocess_kernel(DraftModelPostprocessParams p,
                                               const KernelStatus* preset) {
  if (preset != nullptr && preset->code != 0) return;
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    draft_model_postprocess_request(p, b);
}

cudaError_t draft_model_postprocess_cuda(const DraftModelPostprocessParams& p,
                                         const KernelStatus* preset, cudaStream_t stream) {
  if (p.bsz == 0) return cudaSuccess;
  draft_model_postprocess_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, preset);
  return cudaGetLastError();
}

}  // namespace fd_mtp
