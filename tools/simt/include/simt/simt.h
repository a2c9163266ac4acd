// simt: a CPU stand-in for the small part of CUDA that fd_mtp's kernels use, so that the real
// custom_ops/cuda/*.cu files compile as host C++ and run on the CPU (tests/gpu in CI).
//
// Build tooling only, never shipped. The kernels compile unchanged except for the launch syntax:
// tools/simt/rewrite_launches.py turns `k<<<g, b, s, st>>>(args)` into a call of simt::launch in
// a build copy. A launch runs the grid's blocks one after another; the threads of a block run as
// cooperative fibers (ucontext) that switch only at barriers (and, in the random schedule, at
// atomics), or, in the ThreadSanitizer build (SIMT_THREADS), as one OS thread per CUDA thread.
// What is checked: launch shapes, __syncthreads reached by every thread of the block at the same
// call site, CUB's BlockReduce / BlockScan contracts (see cub/simt_cub.h). Shared memory is
// filled with a poison pattern at the start of every block. Not modelled: warps, timing, the
// memory model (fibers see every write at once), device math functions (host libm).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <tuple>
#include <utility>

#define CUDART_VERSION 12080

// ------------------------------------------------------------------- qualifiers ---
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
// Every __shared__ variable lives in one ELF section, which the runtime poisons before each
// block (the content of shared memory is undefined when a block starts).
#define __shared__ static __attribute__((section("simt_shared")))

// ------------------------------------------------------------------- runtime types ---
enum cudaError {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorSymbolNotFound = 500,
  cudaErrorLaunchOutOfResources = 701,
  cudaErrorLaunchFailure = 719,
  cudaErrorIllegalState = 401,
  cudaErrorNotSupported = 801,
  cudaErrorStreamCaptureUnsupported = 900,
  cudaErrorStreamCaptureInvalidated = 901,
  cudaErrorStreamCaptureImplicit = 906,
  cudaErrorUnknown = 999,
};
typedef enum cudaError cudaError_t;

struct CUstream_st;
typedef struct CUstream_st* cudaStream_t;

// Stream capture (CUDA graphs): see the runtime's "stream capture" section.
enum cudaStreamCaptureMode {
  cudaStreamCaptureModeGlobal = 0,
  cudaStreamCaptureModeThreadLocal = 1,
  cudaStreamCaptureModeRelaxed = 2,
};
enum cudaStreamCaptureStatus {
  cudaStreamCaptureStatusNone = 0,
  cudaStreamCaptureStatusActive = 1,
  cudaStreamCaptureStatusInvalidated = 2,
};
enum cudaGraphNodeType {
  cudaGraphNodeTypeKernel = 0,
  cudaGraphNodeTypeMemcpy = 1,
  cudaGraphNodeTypeMemset = 2,
};
struct CUgraph_st;
struct CUgraphExec_st;
struct CUgraphNode_st;
typedef struct CUgraph_st* cudaGraph_t;
typedef struct CUgraphExec_st* cudaGraphExec_t;
typedef struct CUgraphNode_st* cudaGraphNode_t;

enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4,
};

typedef struct cudaIpcMemHandle_st {
  char reserved[64];
} cudaIpcMemHandle_t;
#define cudaIpcMemLazyEnablePeerAccess 0x01

enum cudaDriverEntryPointQueryResult {
  cudaDriverEntryPointSuccess = 0,
  cudaDriverEntryPointSymbolNotFound = 1,
  cudaDriverEntryPointVersionNotSufficent = 2,
};
#define cudaEnableDefault 0x0

struct uint3 {
  unsigned int x, y, z;
};
struct alignas(16) uint4 {
  unsigned int x, y, z, w;
};
struct dim3 {
  unsigned int x, y, z;
  constexpr dim3(unsigned int vx = 1, unsigned int vy = 1, unsigned int vz = 1)
      : x(vx), y(vy), z(vz) {}
  constexpr dim3(uint3 v) : x(v.x), y(v.y), z(v.z) {}
};

// The runtime calls the sources use; device memory is host memory. IPC has no meaning on one
// CPU process: those calls return cudaErrorNotSupported.
extern "C" {
cudaError_t cudaMalloc(void** ptr, size_t bytes);
cudaError_t cudaFree(void* ptr);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream);
cudaError_t cudaMemset(void* ptr, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream);
cudaError_t cudaStreamSynchronize(cudaStream_t stream);
cudaError_t cudaDeviceSynchronize(void);
cudaError_t cudaGetLastError(void);
cudaError_t cudaPeekAtLastError(void);
const char* cudaGetErrorString(cudaError_t err);
const char* cudaGetErrorName(cudaError_t err);
cudaError_t cudaGetDevice(int* device);
cudaError_t cudaSetDevice(int device);
cudaError_t cudaGetDeviceCount(int* count);
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t* handle, void* ptr);
cudaError_t cudaIpcOpenMemHandle(void** ptr, cudaIpcMemHandle_t handle, unsigned int flags);
cudaError_t cudaIpcCloseMemHandle(void* ptr);
cudaError_t cudaGetDriverEntryPoint(const char* symbol, void** fn, unsigned long long flags,
                                    cudaDriverEntryPointQueryResult* status);
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int version,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status);
// Stream capture: kernel launches, cudaMemsetAsync and device-to-device cudaMemcpyAsync on a
// capturing stream are recorded (arguments copied at the launch) instead of run; a graph
// launch runs them in order. The calls CUDA refuses during a capture (synchronisation,
// synchronous copies, host reads, cudaMalloc / cudaFree) fail it.
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode mode);
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph);
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status);
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph,
                                 unsigned long long flags);
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream);
cudaError_t cudaGraphDestroy(cudaGraph_t graph);
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec);
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count);
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type);
}

namespace simt {

// ------------------------------------------------------------------- the running thread ---
// One CUDA thread of the running block (a fiber, or an OS thread under SIMT_THREADS).
struct Lane {
  uint3 thread_idx;
  uint3 block_idx;
  dim3 block_dim;
  dim3 grid_dim;
  unsigned linear;  // thread_idx as a linear index within the block
};

// The lane running on this OS thread; aborts with a message outside a kernel.
const Lane& current();

// Records the launch's error (the first one wins) and leaves the kernel: the rest of the launch
// is abandoned and cudaGetLastError() returns cudaErrorLaunchFailure (its string names `what`).
[[noreturn]] void fail(const char* what, ...) __attribute__((format(printf, 1, 2)));

// __syncthreads and its reductions. op: 0 none, 1 or, 2 and, 3 count. `user` false for the
// internal barriers of the CUB stand-in (they do not separate two uses of a TempStorage).
int sync_threads(const char* file, int line, int op, int value, bool user = true);
// Number of user __syncthreads the block has completed (per block, starts at 0).
uint64_t barrier_epoch();
// A place where the random schedule may switch to another thread (atomics).
void schedule_point();
// True in the random schedule (FD_MTP_SIMT_SCHEDULE=random[:seed]); rand_below(n) in [0, n).
bool random_schedule();
uint64_t rand_below(uint64_t n);
// Per-thread bookkeeping of the CUB stand-in: the epoch at which this thread last used the
// collective storage `key` (~0 when never), then records `epoch` for it.
uint64_t exchange_use(const void* key, uint64_t epoch);

// ------------------------------------------------------------------- launch ---
struct LaunchConfig {
  dim3 grid, block;
  size_t shared_bytes;
  cudaStream_t stream;
  LaunchConfig(dim3 g, dim3 b, size_t s = 0, cudaStream_t st = nullptr)
      : grid(g), block(b), shared_bytes(s), stream(st) {}
};

// Runs body(closure) once per thread of the grid (see the file comment), or, on a capturing
// stream, records the launch with a copy of the closure (clone / destroy) for graph replays.
void run_kernel(const LaunchConfig& cfg, const char* kernel, const char* file, int line,
                void (*body)(void*), void* closure, void* (*clone)(const void*),
                void (*destroy)(void*));

// k<<<cfg>>>(args...) as rewritten by rewrite_launches.py: `kernel` is a generic lambda calling
// the kernel, so template arguments are deduced from the arguments as nvcc does. The arguments
// are copied once at the launch (as CUDA copies them to the parameter space), then every thread
// gets its own copy; a captured launch keeps a copy of them for every replay.
template <typename K, typename... Args>
void launch(const LaunchConfig& cfg, const char* name, const char* file, int line, K kernel,
            Args... args) {
  struct Closure {
    K kernel;
    std::tuple<Args...> params;
  } closure{kernel, std::tuple<Args...>(args...)};
  run_kernel(
      cfg, name, file, line,
      [](void* c) {
        Closure* self = static_cast<Closure*>(c);
        std::tuple<Args...> mine = self->params;
        std::apply(self->kernel, mine);
      },
      &closure, [](const void* c) -> void* { return new Closure(*static_cast<const Closure*>(c)); },
      [](void* c) { delete static_cast<Closure*>(c); });
}

}  // namespace simt

#define threadIdx (::simt::current().thread_idx)
#define blockIdx (::simt::current().block_idx)
#define blockDim (::simt::current().block_dim)
#define gridDim (::simt::current().grid_dim)

#define __syncthreads() ::simt::sync_threads(__FILE__, __LINE__, 0, 0)
#define __syncthreads_or(p) ::simt::sync_threads(__FILE__, __LINE__, 1, (p) ? 1 : 0)
#define __syncthreads_and(p) ::simt::sync_threads(__FILE__, __LINE__, 2, (p) ? 1 : 0)
#define __syncthreads_count(p) ::simt::sync_threads(__FILE__, __LINE__, 3, (p) ? 1 : 0)

// A fiber sees every write at once; with OS threads (SIMT_THREADS) a sequentially consistent
// fence, which is at least what CUDA's device-scope fence orders.
inline void __threadfence() { __atomic_thread_fence(__ATOMIC_SEQ_CST); }

// ------------------------------------------------------------------- atomics ---
// Relaxed atomics on the real addresses (ThreadSanitizer sees them as atomics), with a schedule
// point first. Only the overloads CUDA has.
namespace simt {
template <typename T>
T atomic_add(T* a, T v) {
  schedule_point();
  return __atomic_fetch_add(a, v, __ATOMIC_RELAXED);
}
template <typename T>
T atomic_cas(T* a, T expected, T desired) {
  schedule_point();
  __atomic_compare_exchange_n(a, &expected, desired, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED);
  return expected;  // the old value either way
}
template <typename T>
T atomic_exch(T* a, T v) {
  schedule_point();
  return __atomic_exchange_n(a, v, __ATOMIC_RELAXED);
}
template <typename T, typename Pick>
T atomic_update(T* a, T v, Pick pick) {
  schedule_point();
  T old = __atomic_load_n(a, __ATOMIC_RELAXED);
  while (!__atomic_compare_exchange_n(a, &old, pick(old, v), false, __ATOMIC_RELAXED,
                                      __ATOMIC_RELAXED)) {
  }
  return old;
}
inline float atomic_add_float(float* a, float v) {
  schedule_point();
  uint32_t* bits = reinterpret_cast<uint32_t*>(a);
  uint32_t old = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    float f;
    std::memcpy(&f, &old, sizeof(f));
    f += v;
    uint32_t next;
    std::memcpy(&next, &f, sizeof(next));
    if (__atomic_compare_exchange_n(bits, &old, next, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED)) {
      std::memcpy(&f, &old, sizeof(f));
      return f;
    }
  }
}
}  // namespace simt

#define SIMT_INT_ATOMICS(T)                                                     \
  inline T atomicAdd(T* a, T v) { return ::simt::atomic_add(a, v); }            \
  inline T atomicCAS(T* a, T e, T d) { return ::simt::atomic_cas(a, e, d); }    \
  inline T atomicExch(T* a, T v) { return ::simt::atomic_exch(a, v); }          \
  inline T atomicMax(T* a, T v) {                                               \
    return ::simt::atomic_update(a, v, [](T x, T y) { return x > y ? x : y; }); \
  }                                                                             \
  inline T atomicMin(T* a, T v) {                                               \
    return ::simt::atomic_update(a, v, [](T x, T y) { return x < y ? x : y; }); \
  }                                                                             \
  inline T atomicOr(T* a, T v) {                                                \
    return ::simt::atomic_update(a, v, [](T x, T y) { return x | y; });         \
  }                                                                             \
  inline T atomicAnd(T* a, T v) {                                               \
    return ::simt::atomic_update(a, v, [](T x, T y) { return x & y; });         \
  }
SIMT_INT_ATOMICS(int)
SIMT_INT_ATOMICS(unsigned int)
SIMT_INT_ATOMICS(unsigned long long)
#undef SIMT_INT_ATOMICS
inline int atomicSub(int* a, int v) { return ::simt::atomic_add(a, -v); }
inline unsigned int atomicSub(unsigned int* a, unsigned int v) {
  return ::simt::atomic_add(a, 0u - v);
}
inline long long atomicMax(long long* a, long long v) {
  return ::simt::atomic_update(a, v, [](long long x, long long y) { return x > y ? x : y; });
}
inline long long atomicMin(long long* a, long long v) {
  return ::simt::atomic_update(a, v, [](long long x, long long y) { return x < y ? x : y; });
}
inline float atomicAdd(float* a, float v) { return ::simt::atomic_add_float(a, v); }

// ------------------------------------------------------------------- float intrinsics ---
// IEEE round-to-nearest operations: the build compiles with -ffp-contract=off, so these are
// exactly the CPU's (and the GPU's) correctly rounded results.
inline float __fadd_rn(float a, float b) { return a + b; }
inline float __fsub_rn(float a, float b) { return a - b; }
inline float __fmul_rn(float a, float b) { return a * b; }
inline float __fdiv_rn(float a, float b) { return a / b; }
inline float __frcp_rn(float a) { return 1.0f / a; }
inline float __fmaf_rn(float a, float b, float c) { return __builtin_fmaf(a, b, c); }
inline float __fsqrt_rn(float a) { return __builtin_sqrtf(a); }
inline unsigned int __float_as_uint(float f) {
  unsigned int u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
}
inline float __uint_as_float(unsigned int u) {
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline int __float_as_int(float f) { return static_cast<int>(__float_as_uint(f)); }
inline float __int_as_float(int i) { return __uint_as_float(static_cast<unsigned int>(i)); }
