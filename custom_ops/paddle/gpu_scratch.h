// GPU branch helpers for the Paddle bindings (compiled only when paddle is
// built with CUDA): a small device buffer for a kernel's status and counter,
// and CUDA error checks.
#pragma once

#ifdef PADDLE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "check.h"
#include "../cuda/launchers.h"

namespace fd_mtp {
namespace check {

inline void cuda(const char* op, cudaError_t err) {
  if (err != cudaSuccess) fail(op, "CUDA", "launch failed: ", cudaGetErrorString(err));
}

}  // namespace check

// Device memory for one KernelStatus and one int64 counter, taken from
// paddle's allocator on the device of `like` (no cudaMalloc per call), zeroed:
// the launchers' reset_status keeps a poisoned code (custom_ops/cuda/stream_status.h),
// so the slot must not start as one by chance.
class GpuScratch {
 public:
  struct Result {
    KernelStatus status;
    int64_t count;
  };
  static_assert(sizeof(Result) % sizeof(int64_t) == 0, "Result must pack into int64 words");

  explicit GpuScratch(const paddle::Tensor& like)
      : buf_(paddle::full({static_cast<int64_t>(sizeof(Result) / sizeof(int64_t))}, 0,
                          paddle::DataType::INT64, like.place())) {}

  KernelStatus* status() { return &reinterpret_cast<Result*>(buf_.data<int64_t>())->status; }
  int64_t* count() { return &reinterpret_cast<Result*>(buf_.data<int64_t>())->count; }

  // Copies the result to the host (synchronises the stream).
  Result fetch(cudaStream_t stream) {
    Result r{};
    check::cuda("fd_mtp", cudaMemcpyAsync(&r, buf_.data<int64_t>(), sizeof(Result),
                                          cudaMemcpyDeviceToHost, stream));
    check::cuda("fd_mtp", cudaStreamSynchronize(stream));
    return r;
  }

 private:
  paddle::Tensor buf_;
};

}  // namespace fd_mtp
#endif  // PADDLE_WITH_CUDA
