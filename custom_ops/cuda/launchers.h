// Declarations of the CUDA launchers of the ops whose dispatch is hand-written
// (the standard-dispatch ones are declared in the generated launchers_gen.h).
// Framework-free: raw pointers, sizes and
// a cudaStream_t. A launcher never allocates and never synchronises; it
// returns the launch's cudaError_t. Ops that validate input write a
// KernelStatus to device memory (`status`); when its code is not 0 the
// launch wrote nothing else.
#pragma once

#include <cuda_runtime_api.h>

#include <cstring>

// The kernel headers and the launchers of the standard-dispatch ops (fd_mtp/schema: cpu=),
// generated from the schema (cmake/gen_ops.py).
#include "launchers_gen.h"

namespace fd_mtp {

// ---- KV-cache sharing (custom_ops/cuda/ipc.cu): host-side CUDA IPC helpers.
// They act on the current device (the caller sets it) and return the CUDA error.
constexpr size_t kCudaIpcHandleBytes = 64;  // sizeof(cudaIpcMemHandle_t)

// The cudaMalloc allocation holding device address `ptr`: its base and size.
cudaError_t cuda_allocation_range(const void* ptr, void** base, uint64_t* bytes);
// The IPC handle (kCudaIpcHandleBytes bytes) of the allocation holding `ptr`,
// ptr's byte offset from the allocation's base and the allocation's size.
cudaError_t cuda_ipc_export(const void* ptr, unsigned char* handle, uint64_t* offset,
                            uint64_t* alloc_bytes);
// Opens `handle` (cudaIpcMemLazyEnablePeerAccess): the allocation's base in
// this process and its size (0 when the driver cannot tell).
cudaError_t cuda_ipc_open(const unsigned char* handle, void** base, uint64_t* alloc_bytes);
// Closes a base returned by cuda_ipc_open.
cudaError_t cuda_ipc_close(void* base);

// out[b] = the sum over i <= b of (width - lens[i]), int32 (wrapping, as numpy's int32 cumsum):
// the cum_offsets / output_cum_offsets_tmp pre_process computes before the packing ops, on the
// device (fd_mtp.cuda's fixed-capacity pre_process: no CuPy kernel, no allocation). One block.
cudaError_t packed_cum_offsets_cuda(const int32_t* lens, int64_t n, int32_t width, int32_t* out,
                                    cudaStream_t stream);

// Philox4x32-10 of n (counter[4], key[2]) uint32 records in `input` ([n, 6])
// into `output` ([n, 4]): the device side of the known-answer test.
cudaError_t philox4x32_10_cuda(const uint32_t* input, uint32_t* output, int64_t n,
                               cudaStream_t stream);

}  // namespace fd_mtp
