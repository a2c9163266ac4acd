#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

// mtp_step_paddle is sequential by nature (a free list shared by the batch,
// preemption in order of holdings); one thread runs the same code as the CPU
// driver, looping over the whole batch, so results are identical and
// deterministic. It is the v0 scheduler's op; v1 never calls it.
__global__ void mtp_step_kernel(MtpStepParams p, KernelStatus* status) {
  mtp_step_check(p, status);
  if (status->code == 0) mtp_step_apply(p);
}

cudaError_t mtp_step_cuda(const MtpStepParams& p, KernelStatus* status, cudaStream_t stream) {
  const cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess) return err;
  mtp_step_kernel<<<1, 1, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
