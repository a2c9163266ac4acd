#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void recover_decode_check_kernel(RecoverDecodeParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) recover_check(p, b, status);
}

__global__ void recover_decode_apply_kernel(RecoverDecodeParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) recover_apply(p, b);
}

cudaError_t recover_decode_task_cuda(const RecoverDecodeParams& p, KernelStatus* status,
                                     cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  const unsigned grid = grid_for(p.bsz);
  recover_decode_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  recover_decode_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
