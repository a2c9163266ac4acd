// CUDA IPC helpers of the KV-cache sharing ops (spec §7): host code only, no
// kernels. Used by the Paddle binding's GPU branch and the raw CUDA module.
//
// cudaIpcGetMemHandle names a whole cudaMalloc allocation and
// cudaIpcOpenMemHandle returns that allocation's base, so a tensor that does
// not start its allocation (a caching allocator's sub-block, a slice) needs
// its offset from the base: cuMemGetAddressRange gives it. The driver API is
// reached through cudaGetDriverEntryPoint, so nothing links libcuda.
#include "launchers.h"

namespace fd_mtp {
namespace {

static_assert(sizeof(cudaIpcMemHandle_t) == kCudaIpcHandleBytes, "cudaIpcMemHandle_t is 64 bytes");

// cuMemGetAddressRange_v2: CUresult (CUdeviceptr* base, size_t* size, CUdeviceptr ptr).
using GetAddressRange = int (*)(unsigned long long*, size_t*, unsigned long long);

cudaError_t address_range_fn(GetAddressRange* fn) {
  void* f = nullptr;
#if CUDART_VERSION >= 12000
  cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if CUDART_VERSION >= 12050
  cudaError_t err = cudaGetDriverEntryPointByVersion("cuMemGetAddressRange", &f, 12000,
                                                     cudaEnableDefault, &found);
#else
  cudaError_t err = cudaGetDriverEntryPoint("cuMemGetAddressRange", &f, cudaEnableDefault, &found);
#endif
  if (err != cudaSuccess) return err;
  if (found != cudaDriverEntryPointSuccess) return cudaErrorSymbolNotFound;
#else  // CUDA 11.3-11.8: no query result
  cudaError_t err = cudaGetDriverEntryPoint("cuMemGetAddressRange", &f, cudaEnableDefault);
  if (err != cudaSuccess) return err;
#endif
  if (f == nullptr) return cudaErrorSymbolNotFound;
  *fn = reinterpret_cast<GetAddressRange>(f);
  return cudaSuccess;
}

}  // namespace

cudaError_t cuda_allocation_range(const void* ptr, void** base, uint64_t* bytes) {
  GetAddressRange range = nullptr;
  cudaError_t err = address_range_fn(&range);
  if (err != cudaSuccess) return err;
  unsigned long long b = 0;
  size_t n = 0;
  if (range(&b, &n, reinterpret_cast<unsigned long long>(ptr)) != 0) return cudaErrorInvalidValue;
  *base = reinterpret_cast<void*>(b);
  *bytes = n;
  return cudaSuccess;
}

cudaError_t cuda_ipc_export(const void* ptr, unsigned char* handle, uint64_t* offset,
                            uint64_t* alloc_bytes) {
  void* base = nullptr;
  cudaError_t err = cuda_allocation_range(ptr, &base, alloc_bytes);
  if (err != cudaSuccess) return err;
  cudaIpcMemHandle_t h;
  err = cudaIpcGetMemHandle(&h, base);
  if (err != cudaSuccess) return err;
  std::memcpy(handle, &h, sizeof(h));
  *offset = static_cast<uint64_t>(static_cast<const char*>(ptr) - static_cast<const char*>(base));
  return cudaSuccess;
}

cudaError_t cuda_ipc_open(const unsigned char* handle, void** base, uint64_t* alloc_bytes) {
  cudaIpcMemHandle_t h;
  std::memcpy(&h, handle, sizeof(h));
  cudaError_t err = cudaIpcOpenMemHandle(base, h, cudaIpcMemLazyEnablePeerAccess);
  if (err != cudaSuccess) return err;
  void* b = nullptr;
  if (cuda_allocation_range(*base, &b, alloc_bytes) != cudaSuccess || b != *base) {
    *alloc_bytes = 0;  // unknown: the caller cannot check the size
    cudaGetLastError();
  }
  return cudaSuccess;
}

cudaError_t cuda_ipc_close(void* base) { return cudaIpcCloseMemHandle(base); }

}  // namespace fd_mtp
