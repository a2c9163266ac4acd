#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

__global__ void paged_attention_check_kernel(PagedAttentionParams p, KernelStatus* status) {
  for (int64_t t = global_thread(); t < p.num_tokens; t += global_stride())
    paged_attention_check(p, t, status);
}

// Pass 1: one thread per (token, kv head) copies its k/v rows into the cache.
__global__ void paged_attention_write_kernel(PagedAttentionParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  const int64_t total = p.num_tokens * p.kv_heads;
  for (int64_t i = global_thread(); i < total; i += global_stride())
    paged_attention_write(p, i / p.kv_heads, i % p.kv_heads);
}

// Pass 2: one thread per (token, q head), the same online-softmax function as
// the CPU driver (a separate launch, so every write of pass 1 is visible).
__global__ void paged_attention_attend_kernel(PagedAttentionParams p, const KernelStatus* status) {
  if (status->code != 0) return;
  const int64_t total = p.num_tokens * p.q_heads;
  for (int64_t i = global_thread(); i < total; i += global_stride())
    paged_attention_token_head(p, i / p.q_heads, i % p.q_heads);
}

}  // namespace

cudaError_t paged_attention_cuda(const PagedAttentionParams& p, KernelStatus* status,
                                 cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.num_tokens == 0) return err;
  paged_attention_check_kernel<<<grid_for(p.num_tokens), kThreads, 0, stream>>>(p, status);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  paged_attention_write_kernel<<<grid_for(p.num_tokens * p.kv_heads), kThreads, 0, stream>>>(
      p, status);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  paged_attention_attend_kernel<<<grid_for(p.num_tokens * p.q_heads), kThreads, 0, stream>>>(
      p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
