// Kernels with known defects (and correct twins) that the simt emulator must catch: its own
// tests (tests/simt/test_simt.py). Written in CUDA, compiled through rewrite_launches.py like
// custom_ops/cuda; never part of fd_mtp.
#include <cub/block/block_reduce.cuh>
#include <cub/block/block_scan.cuh>
#include <cuda_runtime_api.h>

#include <cstdint>

namespace simt_selftest {
namespace {

constexpr int kThreads = 64;

// Sum of 0..blockDim-1 through shared memory; `barrier` false drops the __syncthreads between
// the writes and thread 0's read (a race that the random schedule exposes).
__global__ void shared_sum_kernel(int64_t* out, bool barrier) {
  __shared__ int64_t v[kThreads];
  v[threadIdx.x] = threadIdx.x;
  if (barrier) __syncthreads();
  if (threadIdx.x == 0) {
    int64_t s = 0;
    for (int i = 0; i < kThreads; ++i) s += v[i];
    *out = s;
  }
}

// Threads of odd index wait at another __syncthreads than the even ones.
__global__ void divergent_barrier_kernel(int* out) {
  if (threadIdx.x % 2) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

// Thread 0 leaves before the barrier the others wait at.
__global__ void early_exit_kernel(int* out) {
  if (threadIdx.x == 0) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

// Two reductions on one TempStorage; `barrier` false omits the __syncthreads CUB requires.
__global__ void reduce_twice_kernel(int64_t* out, bool barrier) {
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t a = Reduce(tmp).Sum(threadIdx.x);
  if (barrier) __syncthreads();
  const int64_t b = Reduce(tmp).Sum(1);
  if (threadIdx.x == 0) {
    out[0] = a;
    out[1] = b;
  }
}

// A BlockReduce of kThreads used by whatever block the launch gives.
__global__ void reduce_shape_kernel(int64_t* out) {
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  const int64_t a = Reduce(tmp).Sum(1);
  if (threadIdx.x == 0) *out = a;
}

// Exclusive prefix sum of 1 per thread (out[i] = i) and the aggregate, twice with a barrier.
__global__ void scan_kernel(int64_t* out, int64_t* total) {
  using Scan = cub::BlockScan<int64_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  int64_t pos, agg;
  Scan(tmp).ExclusiveSum(1, pos, agg);
  __syncthreads();
  int64_t pos2;
  Scan(tmp).ExclusiveSum(2, pos2);
  out[threadIdx.x] = pos + pos2;
  total[threadIdx.x] = agg;
}

// Reads shared memory that nothing wrote (`init` false): poisoned, so not zero.
__global__ void uninitialized_shared_kernel(int* out, bool init) {
  __shared__ int flag;
  if (init && threadIdx.x == 0) flag = 0;
  __syncthreads();
  out[threadIdx.x] = flag;
}

// Each thread records the order in which threads ran (an atomic ticket): the schedule.
__global__ void ticket_kernel(int* order, int* next) {
  order[atomicAdd(next, 1)] = static_cast<int>(threadIdx.x + blockIdx.x * blockDim.x);
}

// __syncthreads_or / _and / _count over `flags` (one int per thread).
__global__ void vote_kernel(const int* flags, int* out) {
  const int f = flags[threadIdx.x];
  const int o = __syncthreads_or(f);
  const int a = __syncthreads_and(f);
  const int c = __syncthreads_count(f);
  if (threadIdx.x == 0) {
    out[0] = o;
    out[1] = a;
    out[2] = c;
  }
}

template <typename T>
__global__ void fill_kernel(T* out, T value, int64_t n) {
  for (int64_t i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x)
    out[i] = value;
}

}  // namespace

cudaError_t shared_sum(int64_t* out, bool barrier) {
  shared_sum_kernel<<<1, kThreads>>>(out, barrier);
  return cudaGetLastError();
}
cudaError_t divergent_barrier(int* out) {
  divergent_barrier_kernel<<<1, kThreads>>>(out);
  return cudaGetLastError();
}
cudaError_t early_exit(int* out) {
  early_exit_kernel<<<1, kThreads>>>(out);
  return cudaGetLastError();
}
cudaError_t reduce_twice(int64_t* out, bool barrier) {
  reduce_twice_kernel<<<1, kThreads>>>(out, barrier);
  return cudaGetLastError();
}
cudaError_t reduce_shape(int64_t* out, unsigned threads) {
  reduce_shape_kernel<<<1, threads>>>(out);
  return cudaGetLastError();
}
cudaError_t scan(int64_t* out, int64_t* total) {
  scan_kernel<<<1, kThreads>>>(out, total);
  return cudaGetLastError();
}
cudaError_t uninitialized_shared(int* out, bool init) {
  uninitialized_shared_kernel<<<1, kThreads>>>(out, init);
  return cudaGetLastError();
}
cudaError_t ticket(int* order, int* next, unsigned blocks, unsigned threads) {
  ticket_kernel<<<blocks, threads, 0, nullptr>>>(order, next);
  return cudaGetLastError();
}
cudaError_t vote(const int* flags, int* out) {
  vote_kernel<<<1, kThreads>>>(flags, out);
  return cudaGetLastError();
}
cudaError_t fill(float* out, float value, int64_t n, unsigned blocks, unsigned threads,
                 size_t shared) {
  fill_kernel<<<blocks, threads, shared>>>(out, value, n);
  return cudaGetLastError();
}

// out[i] = value on `stream` (the stream-capture tests: the value is a launch argument, so a
// captured launch replays the value it had at the launch).
cudaError_t fill_on(float* out, float value, int64_t n, cudaStream_t stream) {
  fill_kernel<<<2, 32, 0, stream>>>(out, value, n);
  return cudaGetLastError();
}

}  // namespace simt_selftest
