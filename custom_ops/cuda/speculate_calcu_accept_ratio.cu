#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

// One block walks the whole batch (block-stride loop: no batch cap), sums in
// int64 and commits from thread 0. The two reductions share one TempStorage,
// so a barrier separates them (CUB's contract).
// A status already nonzero on entry is the poisoned preset (reset_status keeps it): the op
// writes nothing on a poisoned stream. Every thread reads it before the first barrier, so the
// whole block leaves together.
__global__ void calcu_accept_ratio_kernel(AcceptRatioParams p, KernelStatus* status) {
  if (status->code != 0) return;
  int64_t drafted = 0, accepted = 0;
  for (int64_t b = threadIdx.x; b < p.bsz; b += blockDim.x) {
    int64_t d = 0, a = 0;
    accept_ratio_counts(p, b, &d, &a);
    drafted += d;
    accepted += a;
  }
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t draft_sum = Reduce(tmp).Sum(drafted);
  __syncthreads();
  const int64_t accept_sum = Reduce(tmp).Sum(accepted);
  if (threadIdx.x == 0) accept_ratio_commit(p, draft_sum, accept_sum, status);
}

cudaError_t speculate_calcu_accept_ratio_cuda(const AcceptRatioParams& p, KernelStatus* status,
                                              cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  calcu_accept_ratio_kernel<<<1, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
