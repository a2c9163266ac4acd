#include <cub/block/block_scan.cuh>

#include "launch.cuh"
#include "launchers.h"
#include "row_copy.cuh"

namespace fd_mtp {
namespace {

unsigned request_blocks(int64_t bsz) {
  return static_cast<unsigned>(bsz < 1 ? 1 : (bsz > 8192 ? 8192 : bsz));
}

// A single block on purpose: the starts of the requests are prefix sums over
// the batch, which the block walks in chunks of kThreads requests. Pass 0
// checks every request (nothing written); pass 1, only when pass 0 found no
// problem, writes the counts and offsets 1..bsz.
__global__ void get_logits_scan_kernel(GetLogitsParams p, KernelStatus* status) {
  using Scan = cub::BlockScan<int64_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int64_t carry_next, carry_batch;
  __shared__ int32_t bad;
  if (threadIdx.x == 0) {
    get_logits_check_batch(p, status);
    bad = status->code;
  }
  __syncthreads();
  if (bad != 0) return;
  for (int pass = 0; pass < 2; ++pass) {
    if (threadIdx.x == 0) carry_next = carry_batch = 0;
    __syncthreads();
    for (int64_t first = 0; first < p.bsz; first += kThreads) {
      const int64_t b = first + threadIdx.x;
      const int64_t n = b < p.bsz ? get_logits_next_count(p, b) : 0;
      const int64_t m = b < p.bsz ? get_logits_batch_count(p, b) : 0;
      int64_t n_off, m_off, n_total, m_total;
      Scan(tmp).ExclusiveSum(n, n_off, n_total);
      __syncthreads();
      Scan(tmp).ExclusiveSum(m, m_off, m_total);
      n_off += carry_next;
      m_off += carry_batch;
      if (b < p.bsz) {
        if (pass == 0) {
          get_logits_check(p, b, b == 0 ? p.cu_next_token_offset[0] : n_off,
                           b == 0 ? p.cu_batch_token_offset[0] : m_off, status);
        } else {
          get_logits_counts(p, b, n_off + n, m_off + m);
        }
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        carry_next += n_total;
        carry_batch += m_total;
      }
      __syncthreads();
    }
    if (pass == 0) {
      // The barrier above made every report of pass 0 visible to the block.
      if (threadIdx.x == 0) bad = *static_cast<volatile int32_t*>(&status->code);
      __syncthreads();
      if (bad != 0) return;
    }
  }
}

// Block (x, y) = request x (grid-stride over requests), column slice y of each
// of its rows (kRowCopyColumns columns; grid-stride over slices): a vectorised
// copy, so that a batch of one still spreads its rows over many blocks.
__global__ void get_logits_copy_kernel(GetLogitsParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    const int64_t rows = get_logits_batch_count(p, b);
    for (int64_t col = static_cast<int64_t>(blockIdx.y) * kRowCopyColumns; col < p.vocab;
         col += static_cast<int64_t>(gridDim.y) * kRowCopyColumns) {
      const int64_t n = p.vocab - col < kRowCopyColumns ? p.vocab - col : kRowCopyColumns;
      for (int64_t r = 0; r < rows; ++r)
        block_copy_floats(get_logits_dest_row(p, b, r) + col, get_logits_source_row(p, b, r) + col,
                          n);
    }
  }
}

}  // namespace

cudaError_t speculate_get_logits_cuda(const GetLogitsParams& p, KernelStatus* status,
                                      cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  get_logits_scan_kernel<<<1, kThreads, 0, stream>>>(p, status);
  const dim3 grid(request_blocks(p.bsz), row_copy_slices(p.vocab));
  get_logits_copy_kernel<<<grid, kRowCopyThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
