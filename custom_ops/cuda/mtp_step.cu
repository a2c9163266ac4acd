#include "block_sched.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

// mtp_step_paddle in one block of kThreads threads, bit-identical to the
// sequential mtp_step_check + mtp_step_apply of the CPU driver for every input
// (the batch order of the free list, the victim order, the error reported).
// The threads walk the batch in chunks of kThreads requests (no batch cap):
//   check   block sums of the per-request counts (first failing request: the
//           lowest index wins in `report`), then the victim replay, one
//           arg-max reduction per victim;
//   step 1  exclusive prefix sum of the blocks each stopped request frees:
//           its offset in the free list, in batch order;
//   step 2  exclusive prefix sum of the need flags: the need list in batch order;
//   step 3  one arg-max reduction per victim (largest holding, lowest index),
//           the victim's blocks appended by the whole block;
//   step 4  exclusive prefix sum over the need list of "not dropped": entry i of
//           rank r takes free_list[free_len - 1 - r], as the sequential pops.
// It is the v0 scheduler's op; v1 never calls it.

struct CheckSums {
  int64_t released, preemptible, need, bad;
};

struct AddSums {
  __device__ CheckSums operator()(const CheckSums& a, const CheckSums& b) const {
    return {a.released + b.released, a.preemptible + b.preemptible, a.need + b.need, a.bad + b.bad};
  }
};

using sched::ArgMax;
using sched::Candidate;
using sched::consider;
using sched::FirstVictim;
using sched::Scan;
using SumReduce = cub::BlockReduce<CheckSums, kThreads>;

struct Shared {
  union {
    Scan::TempStorage scan;
    SumReduce::TempStorage sums;
    ArgMax::TempStorage argmax;
  } tmp;
  int64_t free_len;                      // *free_list_len as the check read it
  int64_t need;                          // the check's count of needy requests
  int64_t bad;                           // the check reported a problem
  int64_t free_after, last_key, last_b;  // check's victim replay
  Candidate victim;
};

// mtp_step_check in parallel; returns true (every thread) when it passed.
__device__ bool check(const MtpStepParams& p, KernelStatus* status, Shared& sh) {
  if (threadIdx.x == 0) {
    const int64_t free_len = *p.free_list_len;
    sh.free_len = free_len;
    sh.bad = free_len < 0 || free_len > p.free_list_capacity;
    if (sh.bad) report(status, kMtpStepFreeListLen, -1, free_len, p.free_list_capacity);
  }
  __syncthreads();
  if (sh.bad) return false;
  CheckSums local{0, 0, 0, 0};
  for (int64_t b = threadIdx.x; b < p.bsz; b += kThreads) {
    if (!mtp_step_check_request(p, b, status)) {
      local.bad = 1;  // `report` keeps the lowest request index: the sequential's first
      break;          // this thread's later requests cannot win
    }
    if (mtp_step_releases(p, b)) {
      local.released += p.used_list_len[b];
    } else {
      local.preemptible += p.used_list_len[b];
      local.need += mtp_step_needed_slot(p, b) >= 0;
    }
  }
  const CheckSums sums = SumReduce(sh.tmp.sums).Reduce(local, AddSums());
  if (threadIdx.x == 0) {
    sh.bad = sums.bad > 0;
    sh.need = sums.need;
    sh.free_after = sh.free_len + sums.released;
    sh.last_key = INT64_MAX;
    sh.last_b = -1;
    if (!sh.bad && sums.need > sh.free_after + sums.preemptible) {
      report(status, kMtpStepOutOfBlocks, -1, sums.need, sh.free_after + sums.preemptible);
      sh.bad = 1;
    }
  }
  __syncthreads();
  if (sh.bad) return false;
  // Replay step 3 on counts: victims in order of decode blocks held
  // (descending, lowest index first), each after the previous one.
  while (sh.need > sh.free_after) {
    const int64_t last_key = sh.last_key, last_b = sh.last_b;
    Candidate best{-1, INT64_MAX};
    for (int64_t b = threadIdx.x; b < p.bsz; b += kThreads) {
      if (mtp_step_releases(p, b)) continue;
      const int64_t key = p.used_list_len[b];
      if (key < last_key || (key == last_key && b > last_b)) consider(&best, key, b);
    }
    const Candidate v = ArgMax(sh.tmp.argmax).Reduce(best, FirstVictim());
    __syncthreads();  // every thread read last_*; tmp reusable
    if (threadIdx.x == 0) {
      sh.free_after += v.key;  // > 0: guaranteed by the out-of-blocks check
      sh.last_key = v.key;
      sh.last_b = v.b;
    }
    __syncthreads();
  }
  // free_after is final (no thread writes it any more): every thread decides.
  const bool full = sh.free_after > p.free_list_capacity;
  if (threadIdx.x == 0 && full)
    report(status, kMtpStepFreeListFull, -1, sh.free_after, p.free_list_capacity);
  return !full;
}

// The sequential mtp_step_apply in parallel. free_len, need and the victim
// are the same in every thread (block-wide results), so the loops are uniform.
__device__ void apply(const MtpStepParams& p, Shared& sh) {
  // 1. Free the decode blocks of stopped or dropped requests, in batch order.
  const int64_t base = sh.free_len;  // *free_list_len, read by the check
  const int64_t released = sched::chunked_scan(
      sh.tmp.scan, p.bsz,
      [&](int64_t b) -> int64_t {
        return mtp_step_releases(p, b) && p.used_list_len[b] > 0 ? p.used_list_len[b] : 0;
      },
      [&](int64_t b, int64_t offset) {
        mtp_step_release_blocks_at(p, b, base + offset);
        p.encoder_block_lens[b] = 0;
      });
  // 2. The need list, in batch order.
  const int64_t need = sched::chunked_scan(
      sh.tmp.scan, p.bsz, [&](int64_t b) -> int64_t { return mtp_step_needed_slot(p, b) >= 0; },
      [&](int64_t b, int64_t offset) { p.need_list[offset] = static_cast<int32_t>(b); });
  int64_t free_len = base + released;
  // 3. While short, preempt the request holding the most decode blocks
  //    (lowest index on ties); it stays in the need list (upstream quirk).
  while (need > free_len) {
    Candidate best{-1, INT64_MAX};
    for (int64_t b = threadIdx.x; b < p.bsz; b += kThreads)
      consider(&best, mtp_step_victim_key(p, b), b);
    const Candidate v = ArgMax(sh.tmp.argmax).Reduce(best, FirstVictim());
    if (threadIdx.x == 0) sh.victim = v;
    __syncthreads();
    const Candidate victim = sh.victim;  // key > 0: guaranteed by the check
    for (int64_t i = threadIdx.x; i < victim.key; i += kThreads)
      mtp_step_release_block(p, victim.b, i, free_len);
    free_len += victim.key;
    __syncthreads();  // every thread read the victim and its row
    if (threadIdx.x == 0) {
      p.used_list_len[victim.b] = 0;
      mtp_step_drop(p, victim.b);
    }
    __syncthreads();
  }
  // 4. Entry i of the need list, the r-th not dropped, pops free_list[free_len - 1 - r].
  const int64_t taken = sched::chunked_scan(
      sh.tmp.scan, need, [&](int64_t i) -> int64_t { return !p.batch_drop[p.need_list[i]]; },
      [&](int64_t i, int64_t rank) {
        mtp_step_take_block(p, p.need_list[i], p.free_list[free_len - 1 - rank]);
      });
  if (threadIdx.x == 0) *p.free_list_len = static_cast<int32_t>(free_len - taken);
}

__global__ void __launch_bounds__(kThreads) mtp_step_kernel(MtpStepParams p, KernelStatus* status) {
  __shared__ Shared sh;
  if (check(p, status, sh)) apply(p, sh);
}

}  // namespace

cudaError_t mtp_step_cuda(const MtpStepParams& p, KernelStatus* status, cudaStream_t stream) {
  const cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess) return err;
  // One block on purpose: the free list is shared by the batch (prefix sums
  // and per-victim reductions); the block walks the batch in chunks.
  mtp_step_kernel<<<1, kThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
