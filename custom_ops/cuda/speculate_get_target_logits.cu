#include "launch.cuh"
#include "launchers.h"
#include "row_copy.cuh"

namespace fd_mtp {
namespace {

unsigned request_blocks(int64_t bsz) {
  return static_cast<unsigned>(bsz < 1 ? 1 : (bsz > 8192 ? 8192 : bsz));
}

__global__ void get_target_logits_check_kernel(GetTargetLogitsParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    get_target_logits_check(p, b, status);
}

// Block (x, y) = request x (grid-stride over requests), column slice y of each
// of its rows (kRowCopyColumns columns; grid-stride over slices): a vectorised
// copy, so that a batch of one still spreads its rows over many blocks.
__global__ void get_target_logits_copy_kernel(GetTargetLogitsParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    const int64_t rows = target_logits_rows(p, b);
    for (int64_t col = static_cast<int64_t>(blockIdx.y) * kRowCopyColumns; col < p.vocab;
         col += static_cast<int64_t>(gridDim.y) * kRowCopyColumns) {
      const int64_t n = p.vocab - col < kRowCopyColumns ? p.vocab - col : kRowCopyColumns;
      for (int64_t r = 0; r < rows; ++r)
        block_copy_floats(target_logits_dest_row(p, b, r) + col,
                          target_logits_source_row(p, b, r) + col, n);
    }
  }
}

}  // namespace

cudaError_t speculate_get_target_logits_cuda(const GetTargetLogitsParams& p, KernelStatus* status,
                                             cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  get_target_logits_check_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, status);
  const dim3 grid(request_blocks(p.bsz), row_copy_slices(p.vocab));
  get_target_logits_copy_kernel<<<grid, kRowCopyThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
