#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void draft_set_value_check_kernel(DraftSetValueParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bs; b += global_stride())
    draft_set_value_check(p, b, status);
}

__global__ void draft_set_value_apply_kernel(DraftSetValueParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bs; b += global_stride()) draft_set_value_apply(p, b);
}

cudaError_t draft_model_set_value_by_flags_cuda(const DraftSetValueParams& p, KernelStatus* status,
                                                cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bs == 0) return err;
  const unsigned grid = grid_for(p.bs);
  draft_set_value_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  draft_set_value_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
