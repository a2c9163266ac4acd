#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

// speculate_step_paddle is sequential by nature: one free list shared by the
// batch, preemption in order of holdings that changes who is preempted next,
// allocation in need-list order, at most one recovery per call. One thread
// runs the same code as the CPU driver over the whole batch (check, then
// apply only when the check passed), so results are identical to the CPU
// and deterministic. The re-prefill copy (at most one request, at most
// input_ids_cols tokens) runs in the same thread. It is the v0 scheduler's
// op; v1 never calls it. speculate_step_system_cache and
// speculate_step_reschedule run the same kernel with their variant set.
__global__ void speculate_step_kernel(SpeculateStepParams p, KernelStatus* status) {
  speculate_step_check(p, status);
  if (status->code == 0) speculate_step_apply(p);
}

static cudaError_t speculate_step_launch(SpeculateStepParams p, SpeculateStepVariant variant,
                                         KernelStatus* status, cudaStream_t stream) {
  p.variant = variant;
  const cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess) return err;
  speculate_step_kernel<<<1, 1, 0, stream>>>(p, status);
  return cudaGetLastError();
}

// The launchers of the three ops (speculate_step.h describes the variants).
cudaError_t speculate_step_cuda(const SpeculateStepParams& p, KernelStatus* status,
                                cudaStream_t stream) {
  return speculate_step_launch(p, kStepPaddle, status, stream);
}

cudaError_t speculate_step_system_cache_cuda(const SpeculateStepParams& p, KernelStatus* status,
                                             cudaStream_t stream) {
  return speculate_step_launch(p, kStepSystemCache, status, stream);
}

cudaError_t speculate_step_reschedule_cuda(const SpeculateStepParams& p, KernelStatus* status,
                                           cudaStream_t stream) {
  return speculate_step_launch(p, kStepReschedule, status, stream);
}

}  // namespace fd_mtp
