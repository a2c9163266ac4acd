#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

// The rows pass's check of every output row r < *rows (grid over an upper bound).
__global__ void rebuild_padding_check_kernel(RebuildPaddingParams p, const int64_t* rows,
                                             KernelStatus* status) {
  const int64_t n = *rows;
  for (int64_t r = global_thread(); r < n; r += global_stride())
    rebuild_padding_check(p, r, status);
}

// One pass over the R x row_units output units: each unit is copied from its
// source row, or zeroed for a row of an empty request.
template <typename Unit>
__global__ void rebuild_padding_copy_kernel(RebuildPaddingParams p, const KernelStatus* status,
                                            int64_t row_units) {
  if (status != nullptr && status->code != 0) return;  // bad input: write nothing
  const Unit* in = static_cast<const Unit*>(p.tmp_out);
  Unit* out = static_cast<Unit*>(p.out);
  const int64_t total = p.out_rows * row_units;
  for (int64_t i = global_thread(); i < total; i += global_stride()) {
    const int64_t r = i / row_units;
    const int64_t src = rebuild_padding_source(p, r).row;
    out[i] = src >= 0 ? in[src * row_units + (i - r * row_units)] : Unit{};
  }
}

template <typename Unit>
cudaError_t copy_as(const RebuildPaddingParams& p, const KernelStatus* status,
                    cudaStream_t stream) {
  const int64_t row_units = p.row_bytes / static_cast<int64_t>(sizeof(Unit));
  rebuild_padding_copy_kernel<Unit>
      <<<grid_for(p.out_rows * row_units), kThreads, 0, stream>>>(p, status, row_units);
  return cudaGetLastError();
}

// The rows (R, or bsz in the plain branch) on the device: one block sums the
// prefill excess over the batch in chunks of kThreads (a reduction: no batch
// cap), thread 0 writes the count (padded: p.live_rows == rows).
__global__ void rebuild_padding_rows_kernel(RebuildPaddingParams p, int64_t* rows,
                                            KernelStatus* status) {
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  if (!p.use_output_padding_offset) {
    if (threadIdx.x == 0) *rows = p.bsz;
    return;
  }
  int64_t prefill = 0;
  for (int64_t b = threadIdx.x; b < p.bsz; b += blockDim.x) {
    const int64_t enc = p.seq_lens_encoder[b];
    if (enc > 0) prefill += enc - 1;
  }
  const int64_t total = Reduce(tmp).Sum(prefill);
  if (threadIdx.x == 0) *rows = rebuild_padding_count(p, total, p.live_rows != nullptr, status);
}

bool aligned_to(const void* ptr, int64_t bytes, int64_t unit) {
  return reinterpret_cast<uintptr_t>(ptr) % unit == 0 && bytes % unit == 0;
}

}  // namespace

cudaError_t rebuild_padding_rows_cuda(const RebuildPaddingParams& p, KernelStatus* status,
                                      int64_t* rows, cudaStream_t stream) {
  cudaError_t err = reset_status(status, rows, stream);
  if (err != cudaSuccess) return err;
  rebuild_padding_rows_kernel<<<1, kThreads, 0, stream>>>(p, rows, status);
  const int64_t bound = p.use_output_padding_offset ? p.tmp_rows : p.bsz;  // R <= T
  if (bound > 0)
    rebuild_padding_check_kernel<<<grid_for(bound), kThreads, 0, stream>>>(p, rows, status);
  return cudaGetLastError();
}

// One copy over p.out_rows rows (16-byte units when the rows and both pointers
// allow, else the widest unit that fits); nothing written while *preset is nonzero.
cudaError_t rebuild_padding_cuda(const RebuildPaddingParams& p, const KernelStatus* preset,
                                 cudaStream_t stream) {
  if (p.out_rows == 0 || p.row_bytes == 0) return cudaSuccess;
  const auto fits = [&](int64_t unit) {
    return aligned_to(p.tmp_out, p.row_bytes, unit) && aligned_to(p.out, p.row_bytes, unit);
  };
  if (fits(16)) return copy_as<uint4>(p, preset, stream);
  if (fits(4)) return copy_as<uint32_t>(p, preset, stream);
  if (fits(2)) return copy_as<uint16_t>(p, preset, stream);
  return copy_as<uint8_t>(p, preset, stream);
}

}  // namespace fd_mtp
