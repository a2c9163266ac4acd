// speculate_get_token_penalty_multi_scores on the GPU (spec §5.5): a check
// launch, then one block per logits row (grid-stride over rows) that reads and
// writes its row once, with vectorised loads and stores.
#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

constexpr int kPenaltyThreads = 1024;

__global__ void token_penalty_check_kernel(TokenPenaltyParams p, KernelStatus* status) {
  if (blockIdx.x == 0)
    for (int64_t i = threadIdx.x; i < p.num_eos; i += blockDim.x) penalty_check_eos(p, i, status);
  const int64_t bd = penalty_lanes(p.pre_ids_cols);
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const int64_t b = penalty_request(p, r);
    if (b < 0) {
      if (threadIdx.x == 0) report(status, kPenaltyOffset, -1, r, p.output_padding_offset[r]);
      continue;
    }
    if (b >= p.bs) continue;
    if (threadIdx.x == 0) penalty_check_scalars(p, b, status);
    if (p.cur_len[b] < 0) continue;
    for (int64_t lane = threadIdx.x; lane < bd; lane += blockDim.x)
      penalty_check_lane(p, b, lane, status);
  }
}

// Vocabularies up to kPenaltyBitmapBits keep a shared-memory bitmap of the
// row's seen ids, so that step 3a reads and writes the logits once and nothing
// else (the bytes-moved floor); the counts are then touched only at the seen
// ids. Larger vocabularies test the counts workspace instead.
constexpr int kPenaltyBitmapWords = 8192;  // 32 KiB
constexpr int64_t kPenaltyBitmapBits = static_cast<int64_t>(kPenaltyBitmapWords) * 32;
constexpr int kPenaltyVec = 4;

template <typename S>
struct alignas(kPenaltyVec * sizeof(S)) PenaltyVec {
  S v[kPenaltyVec];
};

// Block-uniform control flow: every thread of a block works on the same row.
// counts: this block's [vocab] slice of the workspace, zero between rows.
template <typename Traits, bool kBitmap>
__global__ void __launch_bounds__(kPenaltyThreads)
    token_penalty_apply_kernel(TokenPenaltyParams p, int32_t* workspace,
                               const KernelStatus* status) {
  using S = typename Traits::Storage;
  __shared__ uint32_t seen[kBitmap ? kPenaltyBitmapWords : 1];
  if (status->code != 0) return;  // bad input: write nothing
  int32_t* counts = workspace + static_cast<int64_t>(blockIdx.x) * p.vocab;
  const int64_t bd = penalty_lanes(p.pre_ids_cols);
  const S min_len_value = penalty_min_length_value<Traits>();
  const S bad_value = penalty_bad_word_value<Traits>();
  const int64_t words = (p.vocab + 31) / 32;
  for (int64_t r = blockIdx.x; r < p.rows; r += gridDim.x) {
    const int64_t b = penalty_request(p, r);
    if (b >= p.bs) continue;
    S* row = static_cast<S*>(p.logits) + r * p.vocab;
    const int64_t* pre = p.pre_ids + b * p.pre_ids_cols;
    const bool count_ids = p.cur_len[b] >= 0;
    if (kBitmap) {
      for (int64_t w = threadIdx.x; w < words; w += blockDim.x) seen[w] = 0u;
      __syncthreads();
    }
    // 1. min length; 2. repeat counts (upstream's lanes, emulated by the block)
    if (penalty_min_length_applies(p, r, b))
      for (int64_t i = threadIdx.x; i < p.num_eos; i += blockDim.x)
        row[p.eos_token_id[i]] = min_len_value;
    if (count_ids)
      for (int64_t lane = threadIdx.x; lane < bd; lane += blockDim.x)
        for (int64_t j = lane; j < p.pre_ids_cols && pre[j] >= 0; j += bd) {
          const int64_t id = pre[j];
          atomicAdd(&counts[id], 1);
          if (kBitmap) atomicOr(&seen[id >> 5], 1u << (id & 31));
        }
    __syncthreads();
    // 3a. entries never seen: temperature only
    const float temperature = p.temperatures[b];
    if (kBitmap) {
      const uintptr_t align = sizeof(PenaltyVec<S>);
      const int64_t mis =
          static_cast<int64_t>((reinterpret_cast<uintptr_t>(row) % align) / sizeof(S));
      int64_t head = mis == 0 ? 0 : kPenaltyVec - mis;
      if (head > p.vocab) head = p.vocab;
      const int64_t nvec = (p.vocab - head) / kPenaltyVec;
      auto scale = [&](int64_t v, S x) -> S {
        return (seen[v >> 5] >> (v & 31)) & 1u
                   ? x
                   : Traits::store(div_rn(Traits::load(x), temperature));
      };
      for (int64_t v = threadIdx.x; v < head; v += blockDim.x) row[v] = scale(v, row[v]);
      PenaltyVec<S>* vec = reinterpret_cast<PenaltyVec<S>*>(row + head);
      for (int64_t i = threadIdx.x; i < nvec; i += blockDim.x) {
        PenaltyVec<S> x = vec[i];
        const int64_t v0 = head + i * kPenaltyVec;
        for (int j = 0; j < kPenaltyVec; ++j) x.v[j] = scale(v0 + j, x.v[j]);
        vec[i] = x;
      }
      for (int64_t v = head + nvec * kPenaltyVec + threadIdx.x; v < p.vocab; v += blockDim.x)
        row[v] = scale(v, row[v]);
    } else {
      for (int64_t v = threadIdx.x; v < p.vocab; v += blockDim.x)
        if (counts[v] == 0) row[v] = Traits::store(div_rn(Traits::load(row[v]), temperature));
    }
    __syncthreads();
    // 3b. seen entries: the first visitor to take the count applies the
    // penalty (and leaves the count at zero for the next row)
    if (count_ids) {
      const float alpha = Traits::load(static_cast<const S*>(p.penalty_scores)[b]);
      const float beta = Traits::load(static_cast<const S*>(p.frequency_scores)[b]);
      const float gamma = Traits::load(static_cast<const S*>(p.presence_scores)[b]);
      for (int64_t lane = threadIdx.x; lane < bd; lane += blockDim.x)
        for (int64_t j = lane; j < p.pre_ids_cols && pre[j] >= 0; j += bd) {
          const int64_t id = pre[j];
          const int32_t c = atomicExch(&counts[id], 0);
          if (c > 0)
            row[id] = Traits::store(
                penalty_value(Traits::load(row[id]), c, alpha, beta, gamma, temperature));
        }
    }
    __syncthreads();
    // 4. bad words
    for (int64_t i = threadIdx.x; i < p.num_bad_tokens; i += blockDim.x) {
      const int64_t id = p.bad_tokens[i];
      if (in_range(id, p.vocab)) row[id] = bad_value;
    }
    __syncthreads();  // the bitmap is cleared for the next row
  }
}

}  // namespace

cudaError_t token_penalty_cuda(const TokenPenaltyParams& p, KernelStatus* status,
                               cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.rows == 0) return err;
  if (p.counts_rows < 1 || p.counts == nullptr) return cudaErrorInvalidValue;
  const unsigned grid = static_cast<unsigned>(p.counts_rows);
  token_penalty_check_kernel<<<grid_for(p.rows, 1), kThreads, 0, stream>>>(p, status);
  dispatch_float(p.float_kind, [&](auto traits) {
    if (p.vocab <= kPenaltyBitmapBits)
      token_penalty_apply_kernel<decltype(traits), true>
          <<<grid, kPenaltyThreads, 0, stream>>>(p, p.counts, status);
    else
      token_penalty_apply_kernel<decltype(traits), false>
          <<<grid, kPenaltyThreads, 0, stream>>>(p, p.counts, status);
    return 0;
  });
  return cudaGetLastError();
}

}  // namespace fd_mtp
