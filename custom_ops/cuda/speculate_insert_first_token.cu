#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

__global__ void insert_first_token_check_kernel(InsertFirstTokenParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    insert_first_token_check(p, b, status);
}

// Thread = request (grid-stride: no batch cap; upstream runs one block of bsz
// threads); a request writes its few ids sequentially.
__global__ void insert_first_token_apply_kernel(InsertFirstTokenParams p,
                                                const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) {
    const int64_t w = insert_written(p, b);
    for (int64_t i = 0; i < w; ++i) insert_first_token_entry(p, b, i);
  }
}

}  // namespace

cudaError_t speculate_insert_first_token_cuda(const InsertFirstTokenParams& p, KernelStatus* status,
                                              cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  const unsigned grid = grid_for(p.bsz);
  insert_first_token_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  insert_first_token_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
