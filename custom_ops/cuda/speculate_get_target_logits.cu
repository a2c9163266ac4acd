#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

constexpr int kRowThreads = 128;  // threads per request of the row copy (upstream: bsz x 128)

unsigned request_blocks(int64_t bsz) {
  return static_cast<unsigned>(bsz < 1 ? 1 : (bsz > 8192 ? 8192 : bsz));
}

__global__ void get_target_logits_check_kernel(GetTargetLogitsParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    get_target_logits_check(p, b, status);
}

// Block = request (grid-stride over requests), threads = its rows' elements.
__global__ void get_target_logits_copy_kernel(GetTargetLogitsParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    const int64_t total = target_logits_rows(p, b) * p.vocab;
    for (int64_t e = threadIdx.x; e < total; e += blockDim.x) get_target_logits_element(p, b, e);
  }
}

}  // namespace

cudaError_t speculate_get_target_logits_cuda(const GetTargetLogitsParams& p, KernelStatus* status,
                                             cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  get_target_logits_check_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, status);
  get_target_logits_copy_kernel<<<request_blocks(p.bsz), kRowThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
