#include "launch.cuh"
#include "launchers.h"

namespace fd_mtp {
namespace {

// Threads per block of the per-request kernels: block = request (grid-stride
// over requests), threads = that request's tokens, as upstream (bsz x 128).
constexpr int kTokenThreads = 128;

unsigned request_blocks(int64_t bsz) {
  return static_cast<unsigned>(bsz < 1 ? 1 : (bsz > 8192 ? 8192 : bsz));
}

// Check pass: per-request layout checks.
template <typename Params, typename CheckFn>
__global__ void packed_check_kernel(Params p, CheckFn check, KernelStatus* status) {
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride()) check(p, b, status);
}

// Single thread on purpose: it compares one host-read total with the end of
// the layout, after every block of the check pass has finished (the layout is
// valid then, so the end is the largest packed index + 1).
__global__ void packed_end_kernel(int64_t total, const int32_t* cum, int64_t width, int64_t bsz,
                                  int32_t code, KernelStatus* status) {
  if (status->code != 0) return;
  const int64_t end = packed_end(cum, width, bsz);
  if (end > total) report(status, code, -1, total, end);
}

struct PaddingOffsetCheck {
  __device__ void operator()(const PaddingOffsetParams& p, int64_t b, KernelStatus* st) const {
    padding_offset_check(p, b, st);
  }
};

struct OutputPaddingOffsetCheck {
  __device__ void operator()(const OutputPaddingOffsetParams& p, int64_t b,
                             KernelStatus* st) const {
    output_padding_offset_check(p, b, st);
  }
};

__global__ void padding_offset_apply_kernel(PaddingOffsetParams p, const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  if (blockIdx.x == 0 && threadIdx.x == 0) {
    p.cu_seqlens_q[0] = 0;
    p.cu_seqlens_k[0] = 0;
  }
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    const int64_t n = p.seq_len[b];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) padding_offset_token(p, b, i);
    if (threadIdx.x == 0) padding_offset_cu_seqlens(p, b);
  }
}

__global__ void output_padding_offset_apply_kernel(OutputPaddingOffsetParams p,
                                                   const KernelStatus* status) {
  if (status->code != 0) return;  // bad input: write nothing
  for (int64_t b = blockIdx.x; b < p.bsz; b += gridDim.x) {
    const int64_t n = p.seq_lens_output[b];
    for (int64_t i = threadIdx.x; i < n; i += blockDim.x) output_padding_offset_row(p, b, i);
    if (threadIdx.x == 0) output_cum_offsets_of(p, b);
  }
}

// `preset`: the stream's preset status (null: always runs); on a poisoned stream (code nonzero)
// the op writes nothing (docs/gpu_errors.md).
__global__ void seq_lens_output_kernel(SeqLensOutputParams p, const KernelStatus* preset) {
  if (preset != nullptr && preset->code != 0) return;
  for (int64_t b = global_thread(); b < p.bsz; b += global_stride())
    p.seq_lens_output[b] = seq_lens_output_of(p.seq_lens_this_time[b], p.seq_lens_encoder[b]);
}

// packed_cum_offsets: each thread sums a contiguous chunk, an inclusive block scan of the chunk
// sums (Hillis-Steele), then each thread writes its chunk's running sums. Unsigned arithmetic:
// the int32 wrap of numpy's cumsum without signed overflow.
constexpr int kScanThreads = 256;
__global__ void cum_offsets_kernel(const int32_t* lens, int64_t n, int32_t width, int32_t* out) {
  __shared__ uint32_t sums[kScanThreads];
  const int64_t chunk = (n + kScanThreads - 1) / kScanThreads;
  const int64_t begin = threadIdx.x * chunk;
  const int64_t end = begin + chunk < n ? begin + chunk : n;
  uint32_t local = 0;
  for (int64_t i = begin; i < end; ++i)
    local += static_cast<uint32_t>(width) - static_cast<uint32_t>(lens[i]);
  sums[threadIdx.x] = local;
  __syncthreads();
  for (int offset = 1; offset < kScanThreads; offset <<= 1) {
    const uint32_t left =
        threadIdx.x >= static_cast<unsigned>(offset) ? sums[threadIdx.x - offset] : 0u;
    __syncthreads();
    sums[threadIdx.x] += left;
    __syncthreads();
  }
  uint32_t run = threadIdx.x == 0 ? 0u : sums[threadIdx.x - 1];
  for (int64_t i = begin; i < end; ++i) {
    run += static_cast<uint32_t>(width) - static_cast<uint32_t>(lens[i]);
    out[i] = static_cast<int32_t>(run);
  }
}

}  // namespace

cudaError_t packed_cum_offsets_cuda(const int32_t* lens, int64_t n, int32_t width, int32_t* out,
                                    cudaStream_t stream) {
  if (n <= 0) return cudaSuccess;
  cum_offsets_kernel<<<1, kScanThreads, 0, stream>>>(lens, n, width, out);
  return cudaGetLastError();
}

cudaError_t speculate_get_padding_offset_cuda(const PaddingOffsetParams& p, KernelStatus* status,
                                              cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess) return err;
  packed_check_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, PaddingOffsetCheck{}, status);
  packed_end_kernel<<<1, 1, 0, stream>>>(p.token_num, p.cum_offsets, p.input_ids_cols, p.bsz,
                                         kPadTokenNum, status);
  padding_offset_apply_kernel<<<request_blocks(p.bsz), kTokenThreads, 0, stream>>>(p, status);
  return cudaGetLastError();
}

cudaError_t speculate_get_seq_lens_output_cuda(const SeqLensOutputParams& p,
                                               const KernelStatus* preset, cudaStream_t stream) {
  if (p.bsz == 0) return cudaSuccess;
  seq_lens_output_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, preset);
  return cudaGetLastError();
}

cudaError_t speculate_get_output_padding_offset_cuda(const OutputPaddingOffsetParams& p,
                                                     KernelStatus* status, cudaStream_t stream) {
  cudaError_t err = reset_status(status, nullptr, stream);
  if (err != cudaSuccess) return err;
  packed_check_kernel<<<grid_for(p.bsz), kThreads, 0, stream>>>(p, OutputPaddingOffsetCheck{},
                                                                status);
  packed_end_kernel<<<1, 1, 0, stream>>>(p.out_token_num, p.output_cum_offsets_tmp, p.max_seq_len,
                                         p.bsz, kOutTokenNum, status);
  output_padding_offset_apply_kernel<<<request_blocks(p.bsz), kTokenThreads, 0, stream>>>(p,
                                                                                          status);
  return cudaGetLastError();
}

}  // namespace fd_mtp
