// Launch-shape helpers for the CUDA kernels. Every kernel loops over its
// batch with a grid-stride loop, so no batch size is capped by a launch shape.
#pragma once

#include <cstdint>

namespace fd_mtp {

constexpr int kThreads = 256;

// Blocks for `n` independent items, `threads` per block (at least 1 block).
inline unsigned grid_for(int64_t n, int threads = kThreads,
                         int64_t max_blocks = 4096) {
  int64_t blocks = (n + threads - 1) / threads;
  if (blocks < 1) blocks = 1;
  if (blocks > max_blocks) blocks = max_blocks;
  return static_cast<unsigned>(blocks);
}

__device__ inline int64_t global_thread() {
  return static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
}

__device__ inline int64_t global_stride() {
  return static_cast<int64_t>(gridDim.x) * blockDim.x;
}

}  // namespace fd_mtp
