#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

__global__ void speculate_verify_check_kernel(SpeculateVerifyParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    speculate_verify_check(p, b, status);
}

// One thread per request (grid-stride, no batch cap). For kVerifyRejection a
// thread walks the vocabulary of its rows on its own (O(V) per sampled token).
__global__ void speculate_verify_apply_kernel(SpeculateVerifyParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) speculate_verify_apply(p, b);
}

cudaError_t speculate_verify_cuda(const SpeculateVerifyParams& p, KernelStatus* status,
                                  cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  const unsigned grid = grid_for(p.bsz);
  speculate_verify_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  speculate_verify_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

__global__ void philox4x32_10_kernel(const uint32_t* input, uint32_t* output, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const uint32_t* in = input + 6 * i;
    const Philox4x32 out = philox4x32_10(Philox4x32{{in[0], in[1], in[2], in[3]}}, in[4], in[5]);
    for (int k = 0; k < 4; ++k) output[4 * i + k] = out.v[k];
  }
}

cudaError_t philox4x32_10_cuda(const uint32_t* input, uint32_t* output, int64_t n,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  philox4x32_10_kernel<<<grid_for(n), kThreads, 0, stream>>>(input, output, n);
  return cudaGetLastError();
}

}  // namespace fd_mtp
