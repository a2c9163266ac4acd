#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void clear_accept_nums_kernel(ClearAcceptNumsParams p) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    clear_accept_nums_request(p, b);
}

cudaError_t speculate_clear_accept_nums_cuda(const ClearAcceptNumsParams& p, cudaStream_t stream) {
  if (p.bsz == 0) return cudaSuccess;
  clear_accept_nums_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p);
  return cudaGetLastError();
}

}  // namespace fd_mtp
