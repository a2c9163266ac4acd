// CUDA path of ngram_match / hybrid_mtp_ngram (see ../kernels/ngram.h).
//
// Three launches on one stream, no host round trip:
//   1. check  (grid-stride over requests): validates before anything is read
//      out of row or written; the next two launches return when it failed.
//   2. search (one block per request, grid-stride over requests): the block's
//      threads scan the request's search positions in tiles of kThreads and
//      min-reduce the candidates (larger n, then earlier position), stopping
//      after the first tile that reaches the cap. Result per request in
//      `hits`: the winning position u, or -1.
//   3. budget (one block): the threshold bookkeeping is a sequential
//      dependency over requests (request b's budget depends on the drafts
//      granted to every earlier request), so one thread walks the requests in
//      order over shared-memory tiles the block prepared in parallel (plan,
//      available tokens); the block then writes seq_lens_this_time and copies
//      the drafts in parallel.
#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

constexpr int kBudgetTile = 1024;  // requests per shared-memory tile of the budget pass

__global__ void ngram_check_kernel(NgramParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) ngram_check(p, b, status);
}

__global__ void ngram_search_kernel(NgramParams p, int64_t* hits, const KernelStatus* status) {
  if (status->code != 0) return;
  using Reduce = cub::BlockReduce<NgramCandidate, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    const NgramPlan plan = ngram_plan(p, b);
    const int32_t cap = ngram_searches(plan) ? ngram_cap(p, b) : 0;
    NgramCandidate best = ngram_no_candidate();
    if (cap > 0) {  // uniform over the block
      const NgramDomain d = ngram_domain(p, b);
      const int64_t total = d.prompt + d.generated;
      for (int64_t tile = 0; tile < total; tile += blockDim.x) {
        const int64_t u = tile + threadIdx.x;
        if (u < total) {
          const NgramCandidate c = ngram_candidate_at(p, b, d, cap, u);
          if (ngram_better(c, best)) best = c;
        }
        // Tiles are visited in preference order: once a position reaches the
        // cap, no later tile can win.
        if (__syncthreads_or(best.n == cap)) break;
      }
    }
    const NgramCandidate win = Reduce(tmp).Reduce(best, NgramBest());
    if (threadIdx.x == 0) hits[b] = win.n > 0 ? win.u : -1;
    __syncthreads();  // tmp is reused for the next request
  }
}

// Single block by design (see the file comment): the walk is sequential.
__global__ void ngram_budget_kernel(NgramParams p, const int64_t* hits,
                                    const KernelStatus* status) {
  if (status->code != 0) return;
  __shared__ int64_t base[kBudgetTile];
  __shared__ int64_t quota[kBudgetTile];  // untrimmed q, then the copied count
  __shared__ int64_t avail[kBudgetTile];  // tokens after the match (0: no match)
  __shared__ int32_t kind[kBudgetTile];
  using Reduce = cub::BlockReduce<int64_t, kThreads>;
  __shared__ typename Reduce::TempStorage tmp;

  int64_t local = 0;
  for (int64_t b = threadIdx.x; b < p.bsz; b += blockDim.x)
    local += ngram_counts_as_remaining(p, b);
  int64_t remaining = Reduce(tmp).Sum(local);  // valid in thread 0
  int64_t sum = 0;                             // thread 0's running Σ seq_lens_this_time

  for (int64_t first = 0; first < p.bsz; first += kBudgetTile) {
    const int64_t n = p.bsz - first < kBudgetTile ? p.bsz - first : kBudgetTile;
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t b = first + i;
      const NgramPlan plan = ngram_plan(p, b);
      base[i] = plan.base;
      quota[i] = plan.q;
      kind[i] = plan.kind;
      avail[i] = hits[b] >= 0 ? ngram_hit(p, b, ngram_domain(p, b), hits[b]).avail : 0;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      for (int64_t i = 0; i < n; ++i) {
        int64_t count = 0;
        if (kind[i] == kNgramDraft) {
          const NgramPlan plan{kind[i], base[i], quota[i]};
          const int64_t q = ngram_budget(p, plan, sum, &remaining);
          if (q >= 1) count = ngram_min(q, avail[i]);  // avail 0 when nothing matched
        }
        quota[i] = count;
        sum += base[i] + count;
      }
    }
    __syncthreads();
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) {
      const int64_t b = first + i;
      if (kind[i] == kNgramKeep) continue;
      p.seq_lens_this_time[b] = static_cast<int32_t>(base[i] + quota[i]);
      if (quota[i] > 0) {
        const NgramHit hit = ngram_hit(p, b, ngram_domain(p, b), hits[b]);
        ngram_copy(p, b, base[i], hit.src, quota[i]);
      }
    }
    __syncthreads();  // the tile's shared arrays are reused
  }
}

}  // namespace

cudaError_t ngram_cuda(const NgramParams& p, KernelStatus* status, cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  ngram_check_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, status);
  const unsigned search_blocks = static_cast<unsigned>(p.bsz < 65535 ? p.bsz : 65535);
  ngram_search_kernel<<<search_blocks, kThreads, 0, stream>>>(p, p.hits, status);
  ngram_budget_kernel<<<1, kThreads, 0, stream>>>(p, p.hits, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
