// paged_attention on the GPU: a check launch, then the two passes, each
// parallel over tokens, heads and the row (pass 1) or the KV length (pass 2).
//
// Pass 1: one thread per (token, kv head, element of the row): coalesced copies
// of the new k/v rows into their cache slots.
//
// Pass 2 (flash-decoding style, inside a block, so no workspace): one block
// per (token, q head), grid-stride over the pairs. The block's kPagedGroups
// groups of kPagedLanes threads are the partitions of the context: in
// iteration i, group g takes the kPagedLanes positions starting at
// (i * kPagedGroups + g) * kPagedLanes; thread j of the group scores one
// position (q . k * scale), the group takes its chunk's max, rescales its
// running sum and accumulator when the max rises (the online softmax of the
// CPU function, per group), and each thread accumulates the weighted v rows
// for the dimensions it owns (d = j, j + kPagedLanes, ...: coalesced). At the
// end the groups' (max, sum, accumulator) are merged in group order (a fixed
// order: the result does not depend on the schedule): M = max m_g,
// L = sum_g l_g exp(m_g - M), out = sum_g acc_g exp(m_g - M) / L.
// Head dims above kPagedMaxDim use a per-(token, head) kernel running the CPU
// driver's function (correct, not parallel over the KV length).
#include <cmath>

#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

constexpr int kPagedLanes = 32;
constexpr int kPagedGroups = 4;
constexpr int kPagedBlock = kPagedLanes * kPagedGroups;
constexpr int kPagedMaxDim = 256;
constexpr int kPagedDimsPerLane = kPagedMaxDim / kPagedLanes;

__global__ void paged_attention_check_kernel(PagedAttentionParams p, KernelStatus* status) {
  for (int64_t t = global_thread(); t < p.num_tokens; t += global_stride())
    paged_attention_check(p, t, status);
}

// Pass 1: one thread per element of the (token, kv head) rows.
__global__ void paged_attention_write_kernel(PagedAttentionParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  const int64_t row = p.kv_heads * p.head_dim;
  const int64_t total = p.num_tokens * row;
  for (int64_t i = global_thread(); i < total; i += global_stride()) {
    const int64_t t = i / row;
    const int64_t g = (i - t * row) / p.head_dim;
    const int64_t d = i - t * row - g * p.head_dim;
    const int64_t slot = paged_attention_slot(p, t, g) + d;
    p.key_cache[slot] = p.k[i];
    p.value_cache[slot] = p.v[i];
  }
}

// Pass 2, the KV length split over the block's groups (head_dim <= kPagedMaxDim).
__global__ void __launch_bounds__(kPagedBlock)
    paged_attention_split_kernel(PagedAttentionParams p, const KernelStatus* status) {
  __shared__ float score[kPagedGroups][kPagedLanes];
  __shared__ float weight[kPagedGroups][kPagedLanes];
  __shared__ float acc_sh[kPagedGroups][kPagedMaxDim];
  __shared__ float m_sh[kPagedGroups], l_sh[kPagedGroups];
  if (status->code != 0) return;
  const int lane = static_cast<int>(threadIdx.x) % kPagedLanes;
  const int group = static_cast<int>(threadIdx.x) / kPagedLanes;
  const int64_t dim = p.head_dim;
  const int64_t pairs = p.num_tokens * p.q_heads;
  for (int64_t i = blockIdx.x; i < pairs; i += gridDim.x) {
    const int64_t t = i / p.q_heads;
    const int64_t h = i - t * p.q_heads;
    const PagedToken tk = paged_attention_token(p, t);
    const int64_t g = h / (p.q_heads / p.kv_heads);
    const float* qrow = p.q + (t * p.q_heads + h) * dim;
    const int64_t ctx = tk.pos + 1;
    float acc[kPagedDimsPerLane];
    for (int j = 0; j < kPagedDimsPerLane; ++j) acc[j] = 0.f;
    float m = -INFINITY, l = 0.f;  // the group's running max and sum (every lane holds them)
    const int64_t step = static_cast<int64_t>(kPagedGroups) * kPagedLanes;
    for (int64_t first = 0; first < ctx; first += step) {  // block-uniform
      const int64_t start = first + static_cast<int64_t>(group) * kPagedLanes;
      const int64_t pos = start + lane;
      const bool live = pos < ctx;
      int64_t row = 0;
      if (live) {
        row = paged_attention_position(p, tk.request, g, pos);
        score[group][lane] = paged_dot(qrow, p.key_cache + row, dim) * p.scale;
      } else {
        score[group][lane] = -INFINITY;
      }
      __syncthreads();
      float cmax = -INFINITY;
      for (int j = 0; j < kPagedLanes; ++j) cmax = score[group][j] > cmax ? score[group][j] : cmax;
      if (cmax > m) {  // a new running max: rescale (exp(-inf) = 0 at the start)
        const float corr = expf(m - cmax);
        l *= corr;
        for (int j = 0; j < kPagedDimsPerLane; ++j) acc[j] *= corr;
        m = cmax;
      }
      // An empty chunk (start >= ctx) has cmax = -inf = m or less: its weights are unused.
      weight[group][lane] = live ? expf(score[group][lane] - m) : 0.f;
      __syncthreads();
      if (start < ctx) {
        const int64_t n = ctx - start < kPagedLanes ? ctx - start : kPagedLanes;
        for (int64_t j = 0; j < n; ++j) {
          const float w = weight[group][j];
          l += w;
          const float* vrow = p.value_cache + paged_attention_position(p, tk.request, g, start + j);
          for (int k = 0; k < kPagedDimsPerLane; ++k) {
            const int64_t d = lane + static_cast<int64_t>(k) * kPagedLanes;
            if (d < dim) acc[k] += w * vrow[d];
          }
        }
      }
      __syncthreads();  // score / weight are rewritten by the next iteration
    }
    // Fixed-order merge of the groups.
    for (int k = 0; k < kPagedDimsPerLane; ++k) {
      const int64_t d = lane + static_cast<int64_t>(k) * kPagedLanes;
      if (d < dim) acc_sh[group][d] = acc[k];
    }
    if (lane == 0) {
      m_sh[group] = m;
      l_sh[group] = l;
    }
    __syncthreads();
    float big = m_sh[0];
    for (int gi = 1; gi < kPagedGroups; ++gi) big = m_sh[gi] > big ? m_sh[gi] : big;
    float f[kPagedGroups];
    float total = 0.f;
    for (int gi = 0; gi < kPagedGroups; ++gi) {
      f[gi] = l_sh[gi] > 0.f ? expf(m_sh[gi] - big) : 0.f;  // an empty group: m = -inf, l = 0
      total += l_sh[gi] * f[gi];
    }
    const float inv = 1.f / total;  // total >= 1: the max position contributes exp(0)
    float* o = p.out + (t * p.q_heads + h) * dim;
    for (int64_t d = threadIdx.x; d < dim; d += blockDim.x) {
      float sum = 0.f;
      for (int gi = 0; gi < kPagedGroups; ++gi) sum += acc_sh[gi][d] * f[gi];
      o[d] = sum * inv;
    }
    __syncthreads();  // the shared merge buffers are rewritten by the next pair
  }
}

// Pass 2 for head dims above kPagedMaxDim: one thread per (token, q head), the
// same online-softmax function as the CPU driver.
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
  paged_attention_write_kernel<<<grid_for(p.num_tokens * p.kv_heads * p.head_dim, kThreads, 65535),
                                 kThreads, 0, stream>>>(p, status);
  if ((err = cudaGetLastError()) != cudaSuccess) return err;
  if (p.head_dim <= kPagedMaxDim) {
    paged_attention_split_kernel<<<grid_for(p.num_tokens * p.q_heads, 1, 65535), kPagedBlock, 0,
                                   stream>>>(p, status);
  } else {
    paged_attention_attend_kernel<<<grid_for(p.num_tokens * p.q_heads), kThreads, 0, stream>>>(
        p, status);
  }
  return cudaGetLastError();
}

}  // namespace fd_mtp
