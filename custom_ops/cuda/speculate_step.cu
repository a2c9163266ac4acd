#include "block_sched.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

// speculate_step_paddle in one block of kThreads threads, bit-identical to the
// sequential speculate_step_check + speculate_step_apply of the CPU driver for
// every input (the batch order of the free list and the need list, the victim
// order, the error reported). One free list is shared by the batch, so one
// block walks the batch in chunks of kThreads requests (no batch cap):
//   check   block sums of the per-request counts (the first failing request:
//           the lowest index wins in `report`), then the victim replay with one
//           arg-max reduction per victim; thread 0 runs the serial pieces;
//   phase 1 exclusive prefix sum of the blocks each finished request frees:
//           its offset in the free list, in batch order; a second one builds
//           the need list in batch order;
//   phase 2 one arg-max reduction per victim (largest holding, lowest index),
//           the victim's blocks appended and its need-list entry cleared by the
//           whole block;
//   phase 3 exclusive prefix sum over the need list of "still running": the
//           entry of rank k takes free_list[free_len - 1 - k], as the
//           sequential pops;
//   phase 4 thread 0 recovers at most one request; the block re-grants its
//           blocks and copies its generated tokens back into input_ids.
// The sequential version cost O(bsz^2) in one thread when many requests were
// preempted; here each victim costs O(bsz / kThreads) per thread. It is the
// v0 scheduler's op; v1 never calls it. speculate_step_system_cache and
// speculate_step_reschedule run the same kernel with their variant set.

using sched::ArgMax;
using sched::Candidate;
using sched::consider;
using sched::FirstVictim;
using sched::Scan;

struct CountSums {
  int64_t released, need, need_stopped, bad;
};

struct AddCounts {
  __device__ CountSums operator()(const CountSums& a, const CountSums& b) const {
    return {a.released + b.released, a.need + b.need, a.need_stopped + b.need_stopped,
            a.bad + b.bad};
  }
};

using SumReduce = cub::BlockReduce<CountSums, kThreads>;

struct Shared {
  union {
    Scan::TempStorage scan;
    SumReduce::TempStorage sums;
    ArgMax::TempStorage argmax;
  } tmp;
  StepCounts counts;  // the check's phase-1 counts
  StepReplay replay;  // the check's victim replay
  int64_t bad;        // the check reported a problem
  int64_t need_len;   // *need_block_len as the apply goes
  int64_t recovered;  // *recover_lens after phase 4
  Candidate victim;
};

// speculate_step_check in parallel; returns true (every thread) when it passed.
__device__ bool check(const SpeculateStepParams& p, KernelStatus* status, Shared& sh) {
  if (threadIdx.x == 0) sh.bad = !speculate_step_check_lists(p, status);
  __syncthreads();
  if (sh.bad) return false;
  StepCounts local{0, 0, 0};
  int64_t bad = 0;
  for (int64_t b = threadIdx.x; b < p.bsz; b += kThreads) {
    if (!speculate_step_check_request(p, b, &local, status)) {
      bad = 1;  // `report` keeps the lowest request index: the sequential's first
      break;    // this thread's later requests cannot win
    }
  }
  const CountSums sums =
      SumReduce(sh.tmp.sums)
          .Reduce(CountSums{local.released, local.need, local.need_stopped, bad}, AddCounts());
  if (threadIdx.x == 0) {
    sh.counts = StepCounts{sums.released, sums.need, sums.need_stopped};
    sh.bad = sums.bad > 0 || !speculate_step_check_totals(p, sh.counts, &sh.replay, status);
  }
  __syncthreads();
  if (sh.bad) return false;
  // Replay phase 2 on counts: one arg-max per victim, after the cursor.
  while (step_replay_short(sh.counts, sh.replay)) {
    const StepReplay replay = sh.replay;
    Candidate best{-1, INT64_MAX};
    for (int64_t b = threadIdx.x; b < p.bsz; b += kThreads)
      consider(&best, step_replay_key(p, replay, b), b);
    const Candidate v = ArgMax(sh.tmp.argmax).Reduce(best, FirstVictim());
    __syncthreads();  // every thread read sh.replay; tmp reusable
    if (threadIdx.x == 0) {
      const bool found = v.key > 0;  // the sequential search takes keys > 0 only
      sh.bad = !speculate_step_check_victim(p, sh.counts, &sh.replay, found ? v.b : -1,
                                            found ? v.key : 0, status);
    }
    __syncthreads();
    if (sh.bad) return false;
  }
  __syncthreads();  // every thread read sh.bad (the loop may not have run)
  if (threadIdx.x == 0) sh.bad = !speculate_step_check_recovery(p, sh.counts, sh.replay, status);
  __syncthreads();
  return !sh.bad;
}

// The sequential speculate_step_apply in parallel. free_len, need_len and the
// victim are the same in every thread (block-wide results), so loops are uniform.
__device__ void apply(const SpeculateStepParams& p, Shared& sh) {
  const int64_t base = *p.free_list_len;  // validated by the check; written last
  // 1. Finished requests give their decode blocks back, in batch order.
  for (int64_t b = threadIdx.x; b < p.bsz; b += kThreads)
    if (step_finished(p, b)) p.first_token_ids[b] = -1;
  const int64_t released = sched::chunked_scan(
      sh.tmp.scan, p.bsz,
      [&](int64_t b) -> int64_t { return step_finished(p, b) ? p.used_list_len[b] : 0; },
      [&](int64_t b, int64_t offset) {
        for (int64_t i = 0; i < p.used_list_len[b]; ++i)
          step_release_block_at(p, b, i, base + offset);
        p.encoder_block_lens[b] = 0;
        p.used_list_len[b] = 0;
      });
  // Who needs a block, in batch order.
  const int64_t listed = sched::chunked_scan(
      sh.tmp.scan, p.bsz, [&](int64_t b) -> int64_t { return step_needs_block(p, b); },
      [&](int64_t b, int64_t offset) { p.need_block_list[offset] = static_cast<int32_t>(b); });
  int64_t free_len = base + released;
  if (threadIdx.x == 0) sh.need_len = listed;
  __syncthreads();
  // 2. Preempt while short: the request holding the most decode blocks.
  bool flag = false;
  while (sh.need_len > free_len) {
    Candidate best{-1, INT64_MAX};
    for (int64_t b = threadIdx.x; b < p.bsz; b += kThreads)
      consider(&best, step_victim_key(p, b, flag), b);
    const Candidate v = ArgMax(sh.tmp.argmax).Reduce(best, FirstVictim());
    if (threadIdx.x == 0) sh.victim = v;
    __syncthreads();
    const Candidate victim = sh.victim;
    if (victim.key <= 0) {  // nobody outside the exemption: the second pass spares nobody
      if (flag) return;     // unreachable: the check reports it
      flag = true;
      __syncthreads();  // every thread read sh.victim
      continue;
    }
    for (int64_t i = threadIdx.x; i < victim.key; i += kThreads)
      step_release_block_at(p, victim.b, i, free_len);
    free_len += victim.key;
    bool listed_here = false;  // need-list entries are distinct: one thread at most
    for (int64_t i = threadIdx.x; i < listed; i += kThreads) {
      if (p.need_block_list[i] == victim.b) {
        p.need_block_list[i] = -1;
        listed_here = true;
      }
    }
    __syncthreads();  // every thread read the victim, its row and sh.need_len
    if (listed_here) sh.need_len -= 1;
    if (threadIdx.x == 0) step_preempt(p, victim.b);
    __syncthreads();
  }
  // 3. Entry i of the need list, the k-th still running, pops free_list[free_len - 1 - k].
  const int64_t taken = sched::chunked_scan(
      sh.tmp.scan, listed,
      [&](int64_t i) -> int64_t { return step_takes_block(p, p.need_block_list[i]); },
      [&](int64_t i, int64_t rank) {
        step_take_block(p, p.need_block_list[i], p.free_list[free_len - 1 - rank]);
      });
  free_len -= taken;
  for (int64_t i = threadIdx.x; i < listed; i += kThreads) p.need_block_list[i] = -1;
  if (step_reschedules(p)) {
    if (threadIdx.x == 0) {
      *p.need_block_len = 0;
      *p.free_list_len = static_cast<int32_t>(free_len);
    }
    return;
  }
  // 4. Recover at most one block-stepped request (the last pushed); re-prefill it.
  if (threadIdx.x == 0) {
    *p.need_block_len = 0;
    step_recover(p, free_len);
    sh.recovered = *p.recover_lens;
  }
  __syncthreads();
  for (int64_t k = 0; k < sh.recovered; ++k) {
    const int64_t r = p.recover_block_list[k];
    if (threadIdx.x == 0) step_reprefill(p, r);
    const int64_t used = p.used_list_len[r];
    for (int64_t j = threadIdx.x; j < used; j += kThreads) step_regrant_block(p, r, j, free_len);
    free_len -= used;
    __syncthreads();  // input_ids[r][0] before the generated tokens (they may overwrite it)
    for (int64_t j = threadIdx.x; j < p.step_idx[r]; j += kThreads) step_refill_token(p, r, j);
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    *p.recover_lens = 0;
    *p.free_list_len = static_cast<int32_t>(free_len);
  }
}

__global__ void __launch_bounds__(kThreads)
    speculate_step_kernel(SpeculateStepParams p, KernelStatus* status) {
  __shared__ Shared sh;
  if (check(p, status, sh)) apply(p, sh);
}

}  // namespace

static cudaError_t speculate_step_launch(SpeculateStepParams p, SpeculateStepVariant variant,
                                         KernelStatus* status, cudaStream_t stream) {
  p.variant = variant;
  const cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess) return err;
  // One block on purpose: the free list is shared by the batch (prefix sums
  // and per-victim reductions); the block walks the batch in chunks.
  speculate_step_kernel<<<1, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

// The launchers of the three ops (speculate_step.h describes the variants).
cudaError_t speculate_step_cuda(const SpeculateStepParams& p, KernelStatus* status,
                                cudaStream_t stream) {
  return speculate_step_launch(p, kStepPaddle, status, stream);
}

cudaError_t speculate_step_system_cache_cuda(const SpeculateStepParams& p, KernelStatus* status,
                                             cudaStream_t stream) {
  return speculate_step_launch(p, kStepSystemCache, status, stream);
}

cudaError_t speculate_step_reschedule_cuda(const SpeculateStepParams& p, KernelStatus* status,
                                           cudaStream_t stream) {
  return speculate_step_launch(p, kStepReschedule, status, stream);
}

}  // namespace fd_mtp
