// Declarations of the CUDA launchers. Framework-free: raw pointers, sizes and
// a cudaStream_t. A launcher never allocates, never synchronises unless its
// comment says so, and returns the launch's cudaError_t.
#pragma once

#include <cuda_runtime_api.h>

#include "../kernels/draft_model_postprocess.h"

namespace fd_mtp {

cudaError_t draft_model_postprocess_cuda(const DraftModelPostprocessParams& p,
                                         cudaStream_t stream);

}  // namespace fd_mtp
