// top_p_candidates on the GPU (spec §5.6): a check launch, then one block per
// probs row (grid-stride over rows). The block finds the C-th largest key by a
// radix select (4 passes of 8 bits over the row), gathers the keys above it
// and the lowest ids among the keys equal to it (an ordered scan), and sorts
// the C candidates by (key descending, id ascending): the same total order as
// the CPU driver, so the result is deterministic and identical.
#include <cub/block/block_scan.cuh>

#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

constexpr int kTopPThreads = 256;
constexpr int kTopPMaxC = 100;

__global__ void top_p_candidates_check_kernel(TopPCandidatesParams p, KernelStatus* status) {
  for (int64_t r = global_thread(); r < p.rows; r += global_stride()) top_p_check_row(p, r, status);
}

template <typename Traits>
__global__ void top_p_candidates_kernel(TopPCandidatesParams p, KernelStatus* status) {
  using S = typename Traits::Storage;
  using Scan = cub::BlockScan<int, kTopPThreads>;
  __shared__ typename Scan::TempStorage scan_tmp;
  __shared__ int hist[256];
  __shared__ uint32_t s_prefix, s_mask;
  __shared__ int64_t s_rank;  // rank still wanted among keys matching the prefix
  __shared__ int s_greater;
  __shared__ uint32_t c_keys[kTopPMaxC];
  __shared__ int64_t c_ids[kTopPMaxC];
  __shared__ S c_vals[kTopPMaxC];
  __shared__ int64_t o_ids[kTopPMaxC];
  __shared__ S o_vals[kTopPMaxC];
  if (status->code != 0) return;
  const int64_t c = p.candidates;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const S* row = static_cast<const S*>(p.probs) + r * p.vocab;
    if (threadIdx.x == 0) {
      s_prefix = 0;
      s_mask = 0;
      s_rank = c;
      s_greater = 0;
    }
    // Radix select of the C-th largest key, 8 bits at a time from the top.
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = threadIdx.x; i < 256; i += blockDim.x) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix, mask = s_mask;
      for (int64_t v = threadIdx.x; v < p.vocab; v += blockDim.x) {
        const float x = Traits::load(row[v]);
        // The first pass reads every value: a NaN / inf is refused (the call returns nothing).
        if (shift == 24) top_p_check_value(r, v, x, status);
        const uint32_t key = top_p_key(x);
        if ((key & mask) == prefix) atomicAdd(&hist[(key >> shift) & 255u], 1);
      }
      __syncthreads();
      if (threadIdx.x == 0) {
        int64_t above = 0;
        int d = 255;
        for (; d > 0 && above + hist[d] < s_rank; --d) above += hist[d];
        s_rank -= above;
        s_prefix = prefix | (static_cast<uint32_t>(d) << shift);
        s_mask = mask | (255u << shift);
      }
      __syncthreads();
    }
    const uint32_t t = s_prefix;
    const int64_t need = s_rank;  // keys equal to t to take (lowest ids first)
    const int64_t greater = c - need;
    // Gather: keys above t in any order, keys equal to t in id order.
    int64_t ties = 0;
    for (int64_t base = 0; base < p.vocab; base += blockDim.x) {
      const int64_t v = base + threadIdx.x;
      uint32_t key = 0;
      S val{};
      if (v < p.vocab) {
        val = row[v];
        key = top_p_key(Traits::load(val));
      }
      const bool valid = v < p.vocab;
      if (valid && key > t) {
        const int slot = atomicAdd(&s_greater, 1);
        c_keys[slot] = key;
        c_ids[slot] = v;
        c_vals[slot] = val;
      }
      const int eq = valid && key == t;
      int pos, total;
      Scan(scan_tmp).ExclusiveSum(eq, pos, total);
      if (eq && ties + pos < need) {
        const int64_t slot = greater + ties + pos;
        c_keys[slot] = key;
        c_ids[slot] = v;
        c_vals[slot] = val;
      }
      ties += total;
      __syncthreads();  // scan_tmp reuse
    }
    __syncthreads();
    // Rank sort of the C candidates (distinct ids: ranks are a permutation).
    for (int64_t i = threadIdx.x; i < c; i += blockDim.x) {
      int64_t rank = 0;
      for (int64_t j = 0; j < c; ++j)
        rank += top_p_before(c_keys[j], c_ids[j], c_keys[i], c_ids[i]);
      o_ids[rank] = c_ids[i];
      o_vals[rank] = c_vals[i];
    }
    __syncthreads();
    if (threadIdx.x == 0) top_p_write_row<Traits>(p, r, o_ids, o_vals);
    __syncthreads();
  }
}

}  // namespace

cudaError_t top_p_candidates_cuda(const TopPCandidatesParams& p, KernelStatus* status,
                                  cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.rows == 0) return err;
  if (p.candidates < 1 || p.candidates > kTopPMaxC || p.candidates > p.vocab)
    return cudaErrorInvalidValue;
  top_p_candidates_check_kernel<<<grid_for(p.rows), kThreads, 0, stream>>>(p, status);
  const unsigned grid = grid_for(p.rows, 1, 8192);
  dispatch_float(p.float_kind, [&](auto traits) {
    top_p_candidates_kernel<decltype(traits)><<<grid, kTopPThreads, 0, stream>>>(p, status);
    return 0;
  });
  return cudaGetLastError();
}

}  // namespace fd_mtp
