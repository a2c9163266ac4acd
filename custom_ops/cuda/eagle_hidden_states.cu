#include <cub/block/block_scan.cuh>

#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

struct HiddenStatesPlan {
  __device__ RowPlan operator()(const EagleHiddenStatesParams& p, int64_t b,
                                KernelStatus* st) const {
    return eagle_hidden_states_plan(p, b, st);
  }
};

struct SelfHiddenStatesPlan {
  __device__ RowPlan operator()(const EagleSelfHiddenStatesParams& p, int64_t b,
                                KernelStatus* st) const {
    return eagle_self_hidden_states_plan(p, b, st);
  }
};

// One block walks the batch in chunks of kThreads requests (no batch cap),
// prefix-summing the per-request plans, and writes the source row of every
// output row to src_rows (sized input_rows: output never exceeds input).
template <typename Params, typename PlanFn>
__global__ void row_gather_plan_kernel(Params p, PlanFn plan, int64_t input_rows, int64_t* src_rows,
                                       KernelStatus* status, int64_t* out_rows) {
  using Scan = cub::BlockScan<int64_t, kThreads>;
  __shared__ typename Scan::TempStorage tmp;
  __shared__ int64_t carry_in, carry_out;
  if (threadIdx.x == 0) carry_in = carry_out = 0;
  __syncthreads();
  for (int64_t first = 0; first < p.bsz; first += kThreads) {
    const int64_t b = first + threadIdx.x;
    RowPlan r{0, 0, 0};
    if (b < p.bsz) r = plan(p, b, status);
    int64_t in_off, out_off, in_total, out_total;
    Scan(tmp).ExclusiveSum(r.in_rows, in_off, in_total);
    __syncthreads();
    Scan(tmp).ExclusiveSum(r.out_rows, out_off, out_total);
    in_off += carry_in;
    out_off += carry_out;
    for (int64_t j = 0; j < r.out_rows; ++j) {
      const int64_t src = in_off + r.first_src + j;
      if (out_off + j < input_rows && src < input_rows) src_rows[out_off + j] = src;
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      carry_in += in_total;
      carry_out += out_total;
    }
    __syncthreads();
  }
  if (threadIdx.x == 0) {
    if (carry_in > input_rows) report(status, kEagleInputRows, -1, carry_in, input_rows);
    *out_rows = carry_out;
  }
}

// The rows launch of both ops: the plan into p.src_rows, the count into *rows.
template <typename Params, typename PlanFn>
cudaError_t row_gather_rows(const Params& p, PlanFn plan, KernelStatus* status, int64_t* rows,
                            cudaStream_t stream) {
  cudaError_t err = reset_status(status, rows, stream);
  if (err != cudaSuccess) return err;
  // A single block on purpose: the plan is a prefix sum over the batch, which
  // the block walks in chunks; the row copy below is fully parallel.
  row_gather_plan_kernel<<<1, kThreads, 0, stream>>>(p, plan, p.input_rows, p.src_rows, status,
                                                     rows);
  return cudaGetLastError();
}

// output[r] = input[src_rows[r]] for r < out_rows. Padded variant (live_rows
// not null): out_rows is the capacity, rows r >= *live_rows (the plan's count,
// on the device) are zeroed, and nothing is written while *status is nonzero.
template <typename Unit>
__global__ void row_gather_copy_kernel(const Unit* in, Unit* out, const int64_t* src_rows,
                                       int64_t out_rows, int64_t row_units,
                                       const int64_t* live_rows, const KernelStatus* status) {
  if (status != nullptr && status->code != 0) return;  // bad input: write nothing
  const int64_t live = live_rows != nullptr ? *live_rows : out_rows;
  const int64_t total = out_rows * row_units;
  for (int64_t i = global_thread(); i < total; i += global_stride()) {
    const int64_t r = i / row_units;
    out[i] = r < live ? in[src_rows[r] * row_units + (i - r * row_units)] : Unit{};
  }
}

template <typename Unit>
cudaError_t row_gather_copy_as(const void* in, void* out, const int64_t* src_rows, int64_t out_rows,
                               int64_t row_bytes, const int64_t* live_rows,
                               const KernelStatus* status, cudaStream_t stream) {
  const int64_t row_units = row_bytes / static_cast<int64_t>(sizeof(Unit));
  row_gather_copy_kernel<Unit><<<grid_for(out_rows * row_units), kThreads, 0, stream>>>(
      static_cast<const Unit*>(in), static_cast<Unit*>(out), src_rows, out_rows, row_units,
      live_rows, status);
  return cudaGetLastError();
}

bool aligned(const void* ptr, int64_t bytes, int64_t unit) {
  return reinterpret_cast<uintptr_t>(ptr) % unit == 0 && bytes % unit == 0;
}

// Picks the widest copy unit the rows and pointers allow (16-byte vectors, else smaller).
cudaError_t row_gather_copy_any(const void* input, void* output, const int64_t* src_rows,
                                int64_t out_rows, int64_t row_bytes, const int64_t* live_rows,
                                const KernelStatus* status, cudaStream_t stream) {
  if (out_rows == 0 || row_bytes == 0) return cudaSuccess;
  const auto fits = [&](int64_t unit) {
    return aligned(input, row_bytes, unit) && aligned(output, row_bytes, unit);
  };
  if (fits(16))
    return row_gather_copy_as<uint4>(input, output, src_rows, out_rows, row_bytes, live_rows,
                                     status, stream);
  if (fits(4))
    return row_gather_copy_as<uint32_t>(input, output, src_rows, out_rows, row_bytes, live_rows,
                                        status, stream);
  if (fits(2))
    return row_gather_copy_as<uint16_t>(input, output, src_rows, out_rows, row_bytes, live_rows,
                                        status, stream);
  return row_gather_copy_as<uint8_t>(input, output, src_rows, out_rows, row_bytes, live_rows,
                                     status, stream);
}

// The copy of both ops, after their rows launch: output[r] = input[src_rows[r]] for r < the count
// (p.out_rows, or *p.live_rows when padded: rows past it zeroed); nothing is written while
// *status is nonzero.
template <typename Params>
cudaError_t row_gather_copy(const Params& p, const KernelStatus* status, cudaStream_t stream) {
  return row_gather_copy_any(p.input, p.out, p.src_rows, p.out_rows, p.row_bytes, p.live_rows,
                             status, stream);
}

}  // namespace

cudaError_t eagle_get_hidden_states_rows_cuda(const EagleHiddenStatesParams& p,
                                              KernelStatus* status, int64_t* rows,
                                              cudaStream_t stream) {
  return row_gather_rows(p, HiddenStatesPlan{}, status, rows, stream);
}

cudaError_t eagle_get_hidden_states_cuda(const EagleHiddenStatesParams& p,
                                         const KernelStatus* preset, cudaStream_t stream) {
  return row_gather_copy(p, preset, stream);
}

cudaError_t eagle_get_self_hidden_states_rows_cuda(const EagleSelfHiddenStatesParams& p,
                                                   KernelStatus* status, int64_t* rows,
                                                   cudaStream_t stream) {
  return row_gather_rows(p, SelfHiddenStatesPlan{}, status, rows, stream);
}

cudaError_t eagle_get_self_hidden_states_cuda(const EagleSelfHiddenStatesParams& p,
                                              const KernelStatus* preset, cudaStream_t stream) {
  return row_gather_copy(p, preset, stream);
}

}  // namespace fd_mtp
