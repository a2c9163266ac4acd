#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void limit_thinking_check_kernel(LimitThinkingParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bs; b += global_stride())
    limit_thinking_check(p, b, status);
}

__global__ void limit_thinking_apply_kernel(LimitThinkingParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bs; b += global_stride()) limit_thinking_apply(p, b);
}

cudaError_t speculate_limit_thinking_content_length_cuda(const LimitThinkingParams& p,
                                                         KernelStatus* status,
                                                         cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bs == 0) return err;
  const unsigned grid = grid_for(p.bs);
  limit_thinking_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  limit_thinking_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
