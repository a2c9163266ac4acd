// simt stand-in for the part of CUB the kernels use: BlockReduce::{Sum, Reduce} and
// BlockScan::{ExclusiveSum, InclusiveSum}, with CUB's contracts checked:
//   - the block's shape equals the template's (BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z);
//   - a TempStorage is used again by a thread only after a __syncthreads() since its previous
//     use (CUB: "a subsequent __syncthreads() barrier is required if the supplied TempStorage
//     is to be reused");
//   - a reduction's aggregate is valid in thread 0 only: the other threads get their own input
//     back, so code reading it elsewhere gives wrong results here too;
//   - the reduction operator needs only associativity: the random schedule brackets the
//     (in-order) operands at random.
#pragma once

#include <new>

#include "../simt/simt.h"

namespace cub {

enum BlockReduceAlgorithm {
  BLOCK_REDUCE_RAKING_COMMUTATIVE_ONLY,
  BLOCK_REDUCE_RAKING,
  BLOCK_REDUCE_WARP_REDUCTIONS,
};
enum BlockScanAlgorithm { BLOCK_SCAN_RAKING, BLOCK_SCAN_RAKING_MEMOIZE, BLOCK_SCAN_WARP_SCANS };

struct Sum {
  template <typename T>
  T operator()(const T& a, const T& b) const {
    return a + b;
  }
};

namespace simt_detail {

template <int X, int Y, int Z>
void check_shape(const char* what) {
  const dim3 b = ::simt::current().block_dim;
  if (b.x != unsigned(X) || b.y != unsigned(Y) || b.z != unsigned(Z))
    ::simt::fail(
        "%s<T, %d, ..., %d, %d> used in a block of (%u, %u, %u) threads: CUB needs the "
        "block shape of its template arguments",
        what, X, Y, Z, b.x, b.y, b.z);
}

// Entry of a collective on `storage`: this thread's previous use must be behind a __syncthreads.
inline void begin_use(const void* storage, const char* what) {
  const uint64_t epoch = ::simt::barrier_epoch();
  if (::simt::exchange_use(storage, epoch) == epoch)
    ::simt::fail(
        "%s: TempStorage %p reused by thread %u without a __syncthreads() since its "
        "previous use",
        what, storage, ::simt::current().linear);
}

// op over v[lo, hi) (non-empty) in order, bracketed at random when `random`.
template <typename T, typename Op>
T fold_range(const T* v, int lo, int hi, Op& op, bool random) {
  if (random && hi - lo > 1) {
    const int mid = lo + 1 + static_cast<int>(::simt::rand_below(hi - lo - 1));
    return op(fold_range(v, lo, mid, op, true), fold_range(v, mid, hi, op, true));
  }
  T acc = v[lo];
  for (int i = lo + 1; i < hi; ++i) acc = op(acc, v[i]);
  return acc;
}

// The fold of v[lo, hi): random bracketing in the random schedule.
template <typename T, typename Op>
T fold(const T* v, int lo, int hi, Op& op) {
  return fold_range(v, lo, hi, op, ::simt::random_schedule());
}

// Every thread stores its item in `slots`, then waits for the whole block.
template <typename T>
void publish(T* slots, const T& input) {
  new (&slots[::simt::current().linear]) T(input);
  ::simt::sync_threads("cub collective", 0, 0, 0, /*user=*/false);
}

}  // namespace simt_detail

template <typename T, int BLOCK_DIM_X,
          BlockReduceAlgorithm ALGORITHM = BLOCK_REDUCE_WARP_REDUCTIONS, int BLOCK_DIM_Y = 1,
          int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockReduce {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    alignas(T) unsigned char raw[sizeof(T) * kThreads];
  };

  explicit BlockReduce(TempStorage& storage) : storage_(storage) {
    simt_detail::check_shape<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>("cub::BlockReduce");
  }

  T Sum(T input) { return Reduce(input, cub::Sum(), kThreads); }
  T Sum(T input, int num_valid) { return Reduce(input, cub::Sum(), num_valid); }
  template <typename Op>
  T Reduce(T input, Op op) {
    return Reduce(input, op, kThreads);
  }
  template <typename Op>
  T Reduce(T input, Op op, int num_valid) {
    simt_detail::begin_use(&storage_, "cub::BlockReduce");
    T* slots = reinterpret_cast<T*>(storage_.raw);
    simt_detail::publish(slots, input);
    if (::simt::current().linear != 0) return input;  // the aggregate is thread 0's only
    const int n = num_valid < kThreads ? (num_valid < 1 ? 1 : num_valid) : kThreads;
    return simt_detail::fold(slots, 0, n, op);
  }

 private:
  TempStorage& storage_;
};

template <typename T, int BLOCK_DIM_X, BlockScanAlgorithm ALGORITHM = BLOCK_SCAN_RAKING,
          int BLOCK_DIM_Y = 1, int BLOCK_DIM_Z = 1, int LEGACY_PTX_ARCH = 0>
class BlockScan {
  static constexpr int kThreads = BLOCK_DIM_X * BLOCK_DIM_Y * BLOCK_DIM_Z;

 public:
  struct TempStorage {
    alignas(T) unsigned char raw[sizeof(T) * kThreads];
  };

  explicit BlockScan(TempStorage& storage) : storage_(storage) {
    simt_detail::check_shape<BLOCK_DIM_X, BLOCK_DIM_Y, BLOCK_DIM_Z>("cub::BlockScan");
  }

  void ExclusiveSum(T input, T& output) {
    T aggregate;
    ExclusiveSum(input, output, aggregate);
  }
  void ExclusiveSum(T input, T& output, T& block_aggregate) {
    const T* slots = scan(input);
    const int me = static_cast<int>(::simt::current().linear);
    cub::Sum op;
    output = me == 0 ? T() : simt_detail::fold(slots, 0, me, op);
    block_aggregate = simt_detail::fold(slots, 0, kThreads, op);
  }
  void InclusiveSum(T input, T& output) {
    T aggregate;
    InclusiveSum(input, output, aggregate);
  }
  void InclusiveSum(T input, T& output, T& block_aggregate) {
    const T* slots = scan(input);
    const int me = static_cast<int>(::simt::current().linear);
    cub::Sum op;
    output = simt_detail::fold(slots, 0, me + 1, op);
    block_aggregate = simt_detail::fold(slots, 0, kThreads, op);
  }

 private:
  const T* scan(const T& input) {
    simt_detail::begin_use(&storage_, "cub::BlockScan");
    T* slots = reinterpret_cast<T*>(storage_.raw);
    simt_detail::publish(slots, input);
    return slots;
  }

  TempStorage& storage_;
};

}  // namespace cub
