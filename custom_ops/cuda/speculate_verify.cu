#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {

// ---- every strategy but kVerifyRejection: one thread per request (grid-stride, no batch cap) ---

__global__ void speculate_verify_check_kernel(SpeculateVerifyParams p, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    speculate_verify_check(p, b, status);
}

__global__ void speculate_verify_apply_kernel(SpeculateVerifyParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) speculate_verify_apply(p, b);
}

// ---- kVerifyRejection: one block per request (a block-stride loop over the batch) -------------
//
// Per request: thread 0 runs the per-request checks and the accept walk (a
// few entries: the plan); the block then reads the sampled row(s) once:
// warp w of round r takes chunk r * warps + w, lane l its ids 32 j + l
// (coalesced), computing the lane sums and the first non-finite column each
// thread sees; thread 0 the chunk sums (lanes in order), the sequential
// prefixes and the search, warp 0 the lane sums of the found chunk (a 4 KiB
// re-read), thread 0 the id. Every sum is the header's blockwise definition,
// so the token is bit-identical to the CPU driver's whatever the block size.
//
// With the workspace p.sample_tokens ([bsz] int64) this all happens in the
// check pass, which leaves the token there; the apply pass (one thread per
// request) replays the walk and writes. Without it (a binding that has none)
// the check pass only scans for NaN / inf and the apply pass (one block per
// request) reads the rows again to sample.

constexpr int kVerifyThreads = 512;  // 16 warps: 16 chunks (64 KiB of a residual) per round
static_assert(kVerifyThreads % kVerifyLanes == 0, "whole warps");

// The first non-finite column of the ids of lane l of chunk c in row `row` of
// m (vocab columns), or vocab (the same ids as verify_lane_sum).
__device__ int64_t verify_lane_first_non_finite(const float* m, int64_t vocab, int64_t row,
                                                int64_t c, int64_t l) {
  const float* r = m + row * vocab;
  for (int64_t j = 0; j < kVerifySteps; ++j) {
    const int64_t v = c * kVerifyChunk + j * kVerifyLanes + l;
    if (v >= vocab) break;
    if (!finite_f32(r[v])) return v;
  }
  return vocab;
}

// Shared state of one request's sample.
struct VerifyBlockState {
  VerifyPlan plan;
  bool scan;             // the request samples a row (and passed the checks so far)
  long long bad_target;  // first non-finite column of the target row (vocab: none)
  long long bad_draft;   // of the draft row
  float total, t, before;
  long long chunk;
  long long token;
};

// Phase 1 (every thread): the chunk sums of the plan's row into sums[], and,
// when `track`, the first non-finite columns into s.bad_* (a minimum: the
// order of the threads does not matter). The row must be finite for the sums
// to be used.
__device__ void verify_block_chunk_sums(const SpeculateVerifyParams& p, VerifyBlockState& s,
                                        float* sums, float* lanes, bool track) {
  const VerifyPlan& plan = s.plan;
  const bool residual = plan.draft >= 0;
  const bool draft_row = verify_reads_draft_row(p, plan);
  const int64_t chunks = verify_num_chunks(p.vocab);
  const int64_t warps = blockDim.x / kVerifyLanes;
  const int64_t warp = threadIdx.x / kVerifyLanes;
  const int64_t lane = threadIdx.x % kVerifyLanes;
  long long bad_target = p.vocab, bad_draft = p.vocab;
  for (int64_t round = 0; round < chunks; round += warps) {
    const int64_t c = round + warp;
    float sum = 0.f;
    if (c < chunks) {
      sum = verify_lane_sum(p, plan.row, c, lane, residual, plan.draft);
      if (track) {  // the same addresses again: served by the cache, one read of the row
        const int64_t bt = verify_lane_first_non_finite(p.target_probs, p.vocab, plan.row, c, lane);
        if (bt < bad_target) bad_target = bt;
        if (draft_row) {
          const int64_t bd =
              verify_lane_first_non_finite(p.draft_probs, p.vocab, plan.row, c, lane);
          if (bd < bad_draft) bad_draft = bd;
        }
      }
    }
    lanes[threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.x < warps && round + threadIdx.x < chunks)
      sums[round + threadIdx.x] = verify_chunk_sum(lanes + threadIdx.x * kVerifyLanes);
    __syncthreads();
  }
  if (track) {
    if (bad_target < p.vocab) atomicMin(&s.bad_target, bad_target);
    if (bad_draft < p.vocab) atomicMin(&s.bad_draft, bad_draft);
    __syncthreads();
  }
}

// Phase 2 (every thread; the id in s.token): the inverse CDF over the chunk
// sums, the found chunk re-summed by warp 0; total 0 (or, unreachably, no id
// found): the argmax of p, lowest id on ties (each thread's first maximum
// over its ids, then thread 0 over the threads in order; a maximum with that
// tie rule does not depend on the order).
__device__ void verify_block_pick(const SpeculateVerifyParams& p, int64_t b, VerifyBlockState& s,
                                  const float* sums, float* lanes, long long* candidates) {
  const VerifyPlan& plan = s.plan;
  const bool residual = plan.draft >= 0;
  const int64_t chunks = verify_num_chunks(p.vocab);
  if (threadIdx.x == 0) {
    s.total = verify_total(sums, chunks);
    s.chunk = -1;
    s.token = -1;
    if (s.total > 0.f) {
      s.t = verify_uniform(p, b, plan.draw) * s.total;
      float before = 0.f;
      s.chunk = verify_find_chunk(sums, chunks, s.t, &before);
      s.before = before;
    }
  }
  __syncthreads();
  if (s.chunk >= 0) {
    if (threadIdx.x < kVerifyLanes)
      lanes[threadIdx.x] = verify_lane_sum(p, plan.row, s.chunk, threadIdx.x, residual, plan.draft);
    __syncthreads();
    if (threadIdx.x == 0)
      s.token =
          verify_find_in_chunk(p, plan.row, s.chunk, lanes, s.before, s.t, residual, plan.draft);
    __syncthreads();
  }
  if (s.token < 0) {
    const float* probs = p.target_probs + plan.row * p.vocab;
    int64_t mine = -1;
    for (int64_t v = threadIdx.x; v < p.vocab; v += blockDim.x)
      if (mine < 0 || probs[v] > probs[mine]) mine = v;
    candidates[threadIdx.x] = mine;
    __syncthreads();
    if (threadIdx.x == 0) {
      long long best = -1;
      for (unsigned k = 0; k < blockDim.x; ++k) {
        const long long v = candidates[k];
        if (v >= 0 && (best < 0 || probs[v] > probs[best] || (probs[v] == probs[best] && v < best)))
          best = v;
      }
      s.token = best;
    }
    __syncthreads();
  }
}

// Thread 0: the per-request checks and the plan; whether the block scans a row.
__device__ void verify_block_plan(const SpeculateVerifyParams& p, int64_t b, VerifyBlockState& s,
                                  KernelStatus* status) {
  if (threadIdx.x != 0) return;
  s.scan = speculate_verify_check_request(p, b, status, &s.plan);
  if (s.scan && verify_num_chunks(p.vocab) > kVerifyMaxChunks) {
    report(status, kVerifyVocabTooLarge, static_cast<int32_t>(b), p.vocab,
           kVerifyMaxChunks * kVerifyChunk);
    s.scan = false;
  }
  s.bad_target = p.vocab;
  s.bad_draft = p.vocab;
}

// Thread 0: reports the first non-finite value the scan found (target row first).
__device__ bool verify_block_report(const SpeculateVerifyParams& p, int64_t b,
                                    const VerifyBlockState& s, KernelStatus* status) {
  if (s.bad_target < p.vocab) {
    if (threadIdx.x == 0)
      report(status, kVerifyTargetProbsValue, static_cast<int32_t>(b), s.plan.row, s.bad_target);
    return true;
  }
  if (s.bad_draft < p.vocab) {
    if (threadIdx.x == 0)
      report(status, kVerifyDraftProbsValue, static_cast<int32_t>(b), s.plan.row, s.bad_draft);
    return true;
  }
  return false;
}

// With the workspace: checks, one read of each sampled row, the token into
// p.sample_tokens[b].
__global__ void __launch_bounds__(kVerifyThreads)
    verify_rejection_check_sample_kernel(SpeculateVerifyParams p, KernelStatus* status) {
  if (status->code == kStatusPoisoned) return;  // the op is skipped: no row to read
  __shared__ VerifyBlockState s;
  __shared__ float sums[kVerifyMaxChunks];
  __shared__ float lanes[kVerifyThreads];
  __shared__ long long candidates[kVerifyThreads];
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    verify_block_plan(p, b, s, status);
    __syncthreads();
    if (s.scan) {
      verify_block_chunk_sums(p, s, sums, lanes, true);
      if (!verify_block_report(p, b, s, status)) {
        verify_block_pick(p, b, s, sums, lanes, candidates);
        if (threadIdx.x == 0) p.sample_tokens[b] = s.token;
      }
    }
    __syncthreads();  // s is rewritten for the next request
  }
}

// With the workspace: replays the walk, writes (one thread per request).
__global__ void verify_rejection_write_kernel(SpeculateVerifyParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) {
    if (p.is_block_step[b] || p.stop_flags[b]) continue;
    VerifyPlan plan;
    verify_rejection_plan(p, b, &plan, nullptr);
    verify_rejection_write(p, b, plan, plan.row >= 0 ? p.sample_tokens[b] : 0);
  }
}

// Without the workspace: checks and the NaN / inf scan of the sampled rows.
__global__ void __launch_bounds__(kVerifyThreads)
    verify_rejection_check_kernel(SpeculateVerifyParams p, KernelStatus* status) {
  if (status->code == kStatusPoisoned) return;  // the op is skipped: no row to read
  __shared__ VerifyBlockState s;
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    verify_block_plan(p, b, s, status);
    __syncthreads();
    if (s.scan) {
      const VerifyPlan& plan = s.plan;
      long long bad_target = p.vocab, bad_draft = p.vocab;
      const bool draft_row = verify_reads_draft_row(p, plan);
      for (int64_t v = threadIdx.x; v < p.vocab; v += blockDim.x) {
        if (bad_target == p.vocab && !finite_f32(p.target_probs[plan.row * p.vocab + v]))
          bad_target = v;
        if (draft_row && bad_draft == p.vocab && !finite_f32(p.draft_probs[plan.row * p.vocab + v]))
          bad_draft = v;
      }
      if (bad_target < p.vocab) atomicMin(&s.bad_target, bad_target);
      if (bad_draft < p.vocab) atomicMin(&s.bad_draft, bad_draft);
      __syncthreads();
      verify_block_report(p, b, s, status);
    }
    __syncthreads();  // s is rewritten for the next request
  }
}

// Without the workspace: plan, sample (a second read of the rows), write.
__global__ void __launch_bounds__(kVerifyThreads)
    verify_rejection_apply_kernel(SpeculateVerifyParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  __shared__ VerifyBlockState s;
  __shared__ float sums[kVerifyMaxChunks];
  __shared__ float lanes[kVerifyThreads];
  __shared__ long long candidates[kVerifyThreads];
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    if (threadIdx.x == 0) {
      s.scan = !(p.is_block_step[b] || p.stop_flags[b]);
      if (s.scan) verify_rejection_plan(p, b, &s.plan, nullptr);
    }
    __syncthreads();
    if (s.scan) {
      if (s.plan.row >= 0) {
        verify_block_chunk_sums(p, s, sums, lanes, false);
        verify_block_pick(p, b, s, sums, lanes, candidates);
      }
      if (threadIdx.x == 0) verify_rejection_write(p, b, s.plan, s.plan.row >= 0 ? s.token : 0);
    }
    __syncthreads();  // s is rewritten for the next request
  }
}

cudaError_t speculate_verify_cuda(const SpeculateVerifyParams& p, KernelStatus* status,
                                  cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess || p.bsz == 0) return err;
  if (p.strategy == kVerifyRejection) {
    const unsigned blocks = grid_for(p.bsz, 1, 65535);  // one block per request, block-stride
    if (p.sample_tokens != nullptr) {
      verify_rejection_check_sample_kernel<<<blocks, kVerifyThreads, 0, stream>>>(p, status);
      verify_rejection_write_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, status);
    } else {
      verify_rejection_check_kernel<<<blocks, kVerifyThreads, 0, stream>>>(p, status);
      verify_rejection_apply_kernel<<<blocks, kVerifyThreads, 0, stream>>>(p, status);
    }
    return cudaGetLastError();
  }
  const unsigned grid = grid_for(p.bsz);
  speculate_verify_check_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  speculate_verify_apply_kernel<<<grid, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

__global__ void philox4x32_10_kernel(const uint32_t* input, uint32_t* output, int64_t n) {
  for (int64_t i = global_thread(); i < n; i += global_stride()) {
    const uint32_t* in = input + 6 * i;
    const Philox4x32 out = philox4x32_10(Philox4x32{{in[0], in[1], in[2], in[3]}}, in[4], in[5]);
    for (int k = 0; k < 4; ++k) output[4 * i + k] = out.v[k];
  }
}

cudaError_t philox4x32_10_cuda(const uint32_t* input, uint32_t* output, int64_t n,
                               cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  philox4x32_10_kernel<<<grid_for(n, kThreads), kThreads, 0, stream>>>(input, output, n);
  return cudaGetLastError();
}

}  // namespace fd_mtp
