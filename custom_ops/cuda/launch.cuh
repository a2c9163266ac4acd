// Launch-shape helpers for the CUDA kernels. Every kernel loops over its
// batch with a grid-stride loop, so no batch size is capped by a launch shape.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace fd_mtp {

constexpr int kThreads = 256;

// Blocks for `n` independent items, `threads` per block (at least 1 block).
inline unsigned grid_for(int64_t n, int threads = kThreads, int64_t max_blocks = 4096) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

__device__ inline int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline int64_t global_stride() { return static_cast<int64_t>(gridDim.x) * blockDim.x; }

}  // namespace fd_mtp

#include <cub/block/block_reduce.cuh>

#include "../kernels/common.h"

namespace fd_mtp {

// Adds `local` (one value per thread of a kThreads-wide block) to *total.
__device__ inline void block_add(int64_t local, int64_t* total) {
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t sum = Reduce(tmp).Sum(local);
  if (threadIdx.x == 0 && sum != 0)
    atomicAdd(reinterpret_cast<unsigned long long*>(total), static_cast<unsigned long long>(sum));
}

// Resets a status record and a counter (may be null) before a check/apply launch pair: zero,
// except that a code kStatusPoisoned is kept (the stream is poisoned: the apply kernels, which
// write nothing while status->code != 0, skip). A kernel, stream-ordered (stream_status.cu).
cudaError_t reset_status(KernelStatus* status, int64_t* count, cudaStream_t stream);

}  // namespace fd_mtp
