// Block-wide copies of vocabulary-sized float rows, shared by the logits gathers
// (speculate_get_logits, speculate_get_target_logits): coalesced 16-byte loads
// and stores where both sides are 16-byte aligned, 4-byte ones otherwise.
#pragma once

#include <cstdint>

#include <cuda_runtime_api.h>

namespace fd_mtp {

// Columns of a row one block copies in the gathers' launches (a multiple of 4,
// so that a column slice of an aligned row starts aligned).
constexpr int64_t kRowCopyColumns = 4096;
constexpr int kRowCopyThreads = 256;

// Copies n floats from src to dst with the threads of the block.
__device__ inline void block_copy_floats(float* dst, const float* src, int64_t n) {
  const uintptr_t both = reinterpret_cast<uintptr_t>(dst) | reinterpret_cast<uintptr_t>(src);
  int64_t done = 0;
  if ((both & 15u) == 0) {
    const int64_t nv = n / 4;
    const uint4* s = reinterpret_cast<const uint4*>(src);
    uint4* d = reinterpret_cast<uint4*>(dst);
    for (int64_t i = threadIdx.x; i < nv; i += blockDim.x) d[i] = s[i];
    done = nv * 4;
  }
  for (int64_t i = done + threadIdx.x; i < n; i += blockDim.x) dst[i] = src[i];
}

// Column slices per row for a vocabulary (the launches' gridDim.y; at least 1).
inline unsigned row_copy_slices(int64_t vocab) {
  int64_t s = (vocab + kRowCopyColumns - 1) / kRowCopyColumns;
  if (s < 1) s = 1;
  if (s > 65535) s = 65535;  // the kernels loop over slices beyond gridDim.y
  return static_cast<unsigned>(s);
}

}  // namespace fd_mtp
