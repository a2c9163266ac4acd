// Block-wide building blocks of the one-block schedulers (mtp_step.cu,
// speculate_step.cu): a free list shared by the whole batch makes those ops
// sequential in their definition, so one block of kThreads threads walks the
// batch in chunks (no batch cap) with prefix sums and arg-max reductions,
// bit-identical to the sequential CPU code.
#pragma once

#include <cstdint>

#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>

#include "launch.cuh"

namespace fd_mtp {
namespace sched {

// A victim candidate: the key (blocks held) and the request; -1 / INT64_MAX for none.
struct Candidate {
  int64_t key, b;
};

// Larger key first, lower index on ties: the sequential scan's `key > most`
// in batch order. Associative and commutative.
struct FirstVictim {
  __device__ Candidate operator()(const Candidate& x, const Candidate& y) const {
    return (x.key > y.key || (x.key == y.key && x.b < y.b)) ? x : y;
  }
};

__device__ inline void consider(Candidate* c, int64_t key, int64_t b) {
  if (key > c->key || (key == c->key && b < c->b)) *c = {key, b};
}

using Scan = cub::BlockScan<int64_t, kThreads>;
using ArgMax = cub::BlockReduce<Candidate, kThreads>;

// Block-wide exclusive prefix sum of count(i) over [0, n), in chunks of
// kThreads; body(i, offset) runs for every i with count(i) > 0. Returns the
// total in every thread (the scan's block aggregate, summed per thread) and
// ends with the block synchronised.
template <typename Count, typename Body>
__device__ int64_t chunked_scan(Scan::TempStorage& tmp, int64_t n, Count count, Body body) {
  int64_t carry = 0;
  for (int64_t first = 0; first < n; first += kThreads) {
    const int64_t i = first + threadIdx.x;
    const int64_t c = i < n ? count(i) : 0;
    int64_t offset, total;
    Scan(tmp).ExclusiveSum(c, offset, total);
    if (c > 0) body(i, carry + offset);
    carry += total;
    __syncthreads();  // tmp reusable; the body's writes visible to the block
  }
  __syncthreads();
  return carry;
}

}  // namespace sched
}  // namespace fd_mtp
