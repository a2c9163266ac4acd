// top_p_candidates on the GPU (spec §5.6): a check launch, then one block per
// probs row (grid-stride over rows) that reads its row from global memory
// exactly once (the bytes-moved floor).
//
// The block streams the row in id order, in tiles of kTopPThreads x 2 x 4
// values (vectorised, coalesced loads; a scalar head and tail where the row is
// not aligned), and appends the values that may still be among the C best to a
// shared-memory buffer, in id order (a block scan gives every thread its
// slots). While the buffer has never been full every value is appended; when
// a tile would overflow it, the buffer is cut to its C best entries (a radix
// select over the buffer, 4 passes of 8 bits, then a stable compaction that
// keeps the keys above the C-th key and the lowest ids equal to it) and from
// then on a value enters only when its key is strictly above the C-th kept key
// (a later id with an equal key ranks after all C kept entries). At the end of
// the row the buffer is cut to its C best once more and those C are ranked by
// (key descending, id ascending): the same total order as the CPU driver, so
// the result is deterministic and bit-identical to it.
#include <cstdint>

#include <cub/block/block_scan.cuh>

#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

constexpr int kTopPThreads = 512;
constexpr int kTopPVec = 4;   // values per vector load (16 bytes of float32, 8 of 16-bit)
constexpr int kTopPVecs = 2;  // consecutive vectors per thread and tile
constexpr int kTopPPerThread = kTopPVec * kTopPVecs;
constexpr int kTopPMaxC = 100;
constexpr int kTopPCap = 4224;  // buffer entries (33 KiB of shared memory)
static_assert(kTopPCap >= kTopPMaxC + kTopPThreads * kTopPPerThread, "a tile must fit after a cut");

using TopPScan = cub::BlockScan<int, kTopPThreads>;

template <typename S>
struct alignas(kTopPVec * sizeof(S)) TopPVec {
  S v[kTopPVec];
};

template <typename S>
struct TopPShared {
  typename TopPScan::TempStorage scan;
  uint32_t keys[kTopPCap];  // the buffer: keys and ids, in id order
  uint32_t ids[kTopPCap];
  int hist[256];
  uint32_t prefix;  // radix select: the c-th key's bits found so far
  uint32_t mask;
  int rank;  // radix select: rank still wanted among the keys matching prefix
  int64_t o_ids[kTopPMaxC];
  S o_vals[kTopPMaxC];
};

// The row's buffer state, block-uniform: every thread holds the same values.
struct TopPState {
  int n;           // entries in the buffer
  bool bounded;    // the buffer was cut once: `bound` is the c-th best key so far,
  uint32_t bound;  // and a value enters only when its key is above it
};

__global__ void top_p_candidates_check_kernel(TopPCandidatesParams p, KernelStatus* status) {
  for (int64_t r = global_thread(); r < p.rows; r += global_stride()) top_p_check_row(p, r, status);
}

// Radix select over the buffer's n keys: sh.prefix = the c-th largest key,
// sh.rank = how many entries equal to it are among the c best. Block-wide;
// starts with a barrier, so the buffer writes before the call are visible.
template <typename S>
__device__ void top_p_select(TopPShared<S>& sh, int n, int c) {
  for (int shift = 24; shift >= 0; shift -= 8) {
    for (int i = threadIdx.x; i < 256; i += blockDim.x) sh.hist[i] = 0;
    if (shift == 24 && threadIdx.x == 0) {
      sh.prefix = 0;
      sh.mask = 0;
      sh.rank = c;
    }
    __syncthreads();
    const uint32_t prefix = sh.prefix, mask = sh.mask;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
      const uint32_t key = sh.keys[i];
      if ((key & mask) == prefix) atomicAdd(&sh.hist[(key >> shift) & 255u], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int above = 0;
      int d = 255;
      for (; d > 0 && above + sh.hist[d] < sh.rank; --d) above += sh.hist[d];
      sh.rank -= above;
      sh.prefix = prefix | (static_cast<uint32_t>(d) << shift);
      sh.mask = mask | (255u << shift);
    }
    __syncthreads();
  }
}

// Cuts the buffer to its c best entries, keeping their (id) order: the keys
// above the c-th key and the first sh.rank entries equal to it. In place: an
// entry moves only to a lower slot, below the chunk being read. Ends with a
// barrier.
template <typename S>
__device__ void top_p_cut(TopPShared<S>& sh, TopPState& st, int c) {
  top_p_select(sh, st.n, c);
  const uint32_t t = sh.prefix;
  const int need = sh.rank;
  int kept = 0, ties = 0;  // block-uniform
  for (int base = 0; base < st.n; base += blockDim.x) {
    const int i = base + static_cast<int>(threadIdx.x);
    const bool valid = i < st.n;
    const uint32_t key = valid ? sh.keys[i] : 0u;
    const uint32_t id = valid ? sh.ids[i] : 0u;
    const int eq = valid && key == t;
    int eq_pos, eq_total;
    TopPScan(sh.scan).ExclusiveSum(eq, eq_pos, eq_total);
    __syncthreads();
    const int keep = valid && (key > t || (eq && ties + eq_pos < need));
    int pos, total;
    TopPScan(sh.scan).ExclusiveSum(keep, pos, total);
    __syncthreads();  // every read of this chunk is done; the scan storage is free
    if (keep) {
      sh.keys[kept + pos] = key;
      sh.ids[kept + pos] = id;
    }
    kept += total;
    ties += eq_total;
  }
  __syncthreads();
  st.n = kept;
  st.bounded = true;
  st.bound = t;
}

// One tile: this thread's `count` values (ids first .. first + count - 1, in
// id order across the threads) enter the buffer where they may still be among
// the c best. Block-wide (every thread calls it, count may be 0).
template <typename Traits>
__device__ void top_p_offer(TopPShared<typename Traits::Storage>& sh, TopPState& st,
                            const TopPCandidatesParams& p, int64_t r, int64_t first, int count,
                            const typename Traits::Storage* vals, KernelStatus* status) {
  uint32_t keys[kTopPPerThread];
  for (int j = 0; j < kTopPPerThread; ++j) {
    keys[j] = 0u;
    if (j < count) {
      const float x = Traits::load(vals[j]);
      top_p_check_value(r, first + j, x, status);  // a NaN / inf refuses the call
      keys[j] = top_p_key(x);
    }
  }
  int n_in = 0;
  for (int j = 0; j < kTopPPerThread; ++j) n_in += j < count && (!st.bounded || keys[j] > st.bound);
  int off, total;
  TopPScan(sh.scan).ExclusiveSum(n_in, off, total);
  __syncthreads();                // the scan storage is free again
  if (st.n + total > kTopPCap) {  // block-uniform: cut to the c best, then count again
    top_p_cut(sh, st, static_cast<int>(p.candidates));
    n_in = 0;
    for (int j = 0; j < kTopPPerThread; ++j) n_in += j < count && keys[j] > st.bound;
    TopPScan(sh.scan).ExclusiveSum(n_in, off, total);
    __syncthreads();
  }
  const int base = st.n + off;
  int k = 0;
  for (int j = 0; j < kTopPPerThread; ++j) {
    if (j < count && (!st.bounded || keys[j] > st.bound)) {
      sh.keys[base + k] = keys[j];
      sh.ids[base + k] = static_cast<uint32_t>(first + j);
      ++k;
    }
  }
  st.n += total;
}

template <typename Traits>
__global__ void __launch_bounds__(kTopPThreads)
    top_p_candidates_kernel(TopPCandidatesParams p, KernelStatus* status) {
  using S = typename Traits::Storage;
  __shared__ TopPShared<S> sh;
  if (status->code != 0) return;
  const int c = static_cast<int>(p.candidates);
  const int tid = static_cast<int>(threadIdx.x);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const S* row = static_cast<const S*>(p.probs) + r * p.vocab;
    TopPState st{0, false, 0u};
    // Scalar head up to the first vector-aligned value, vectors, scalar tail.
    const uintptr_t align = sizeof(TopPVec<S>);
    const int64_t mis =
        static_cast<int64_t>((reinterpret_cast<uintptr_t>(row) % align) / sizeof(S));
    int64_t head = mis == 0 ? 0 : kTopPVec - mis;
    if (head > p.vocab) head = p.vocab;
    const int64_t nvec = (p.vocab - head) / kTopPVec;
    const int64_t tail_first = head + nvec * kTopPVec;
    S vals[kTopPPerThread];
    {
      const int count = tid < head ? 1 : 0;
      if (count) vals[0] = row[tid];
      top_p_offer<Traits>(sh, st, p, r, tid, count, vals, status);
    }
    const TopPVec<S>* vec = reinterpret_cast<const TopPVec<S>*>(row + head);
    for (int64_t base = 0; base < nvec; base += static_cast<int64_t>(kTopPThreads) * kTopPVecs) {
      const int64_t first_vec = base + static_cast<int64_t>(tid) * kTopPVecs;
      int count = 0;
      for (int u = 0; u < kTopPVecs; ++u) {
        if (first_vec + u < nvec) {
          const TopPVec<S> x = vec[first_vec + u];
          for (int j = 0; j < kTopPVec; ++j) vals[u * kTopPVec + j] = x.v[j];
          count += kTopPVec;
        }
      }
      top_p_offer<Traits>(sh, st, p, r, head + first_vec * kTopPVec, count, vals, status);
    }
    {
      const int count = tail_first + tid < p.vocab ? 1 : 0;
      if (count) vals[0] = row[tail_first + tid];
      top_p_offer<Traits>(sh, st, p, r, tail_first + tid, count, vals, status);
    }
    if (st.n > c)
      top_p_cut(sh, st, c);  // block-uniform; ends with a barrier
    else
      __syncthreads();  // the last tile's entries are visible
    // Rank the c candidates (distinct ids: the ranks are a permutation).
    for (int i = tid; i < c; i += kTopPThreads) {
      int rank = 0;
      for (int j = 0; j < c; ++j)
        rank += top_p_before(sh.keys[j], sh.ids[j], sh.keys[i], sh.ids[i]);
      sh.o_ids[rank] = sh.ids[i];
      sh.o_vals[rank] = row[sh.ids[i]];
    }
    __syncthreads();
    if (tid == 0) top_p_write_row<Traits>(p, r, sh.o_ids, sh.o_vals);
    __syncthreads();  // the buffer is rewritten by the next row
  }
}

}  // namespace

cudaError_t top_p_candidates_cuda(const TopPCandidatesParams& p, KernelStatus* status,
                                  cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.rows == 0) return err;
  if (p.candidates < 1 || p.candidates > kTopPMaxC || p.candidates > p.vocab ||
      p.vocab > static_cast<int64_t>(UINT32_MAX))
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
