// fd_mtp_speculate_get_padding_offset (spec §5.1),
// fd_mtp_speculate_get_seq_lens_output (§5.2) and
// fd_mtp_speculate_get_output_padding_offset (§5.3): the packed token layout.
#include "gpu_scratch.h"
#include "ops.h"
#include "packing_check.h"
#include "../kernels/speculate_padding.h"

namespace {
using paddle::DataType;

constexpr fd_mtp::StatusInfo kPaddingStatus[] = {
    {fd_mtp::kPadNegativeSeqLen, "seq_len", "is {value}; token counts must be >= {limit}"},
    {fd_mtp::kPadInputIdsRow, "seq_len",
     "is {value} for a prefilling request but its input_ids row has {limit} columns"},
    {fd_mtp::kPadDraftTokensRow, "seq_len",
     "is {value} for a decoding request but its draft_tokens row has {limit} columns"},
    {fd_mtp::kPadCumOffsets, "cum_offsets",
     "is {value}; it must be the inclusive prefix sum of input_ids.shape[1] - seq_len, {limit}"},
    {fd_mtp::kPadTokenNum, "token_num", "is {value} but seq_len sums to {limit}"},
};

constexpr fd_mtp::StatusInfo kOutputStatus[] = {
    {fd_mtp::kOutNegativeSeqLens, "seq_lens_output", "is {value}; row counts must be >= {limit}"},
    {fd_mtp::kOutSeqLensTooLong, "seq_lens_output", "is {value}; it must be <= max_seq_len = {limit}"},
    {fd_mtp::kOutCumOffsets, "output_cum_offsets_tmp",
     "is {value}; it must be the inclusive prefix sum of max_seq_len - seq_lens_output, {limit}"},
    {fd_mtp::kOutTokenNum, "out_token_num", "is {value} but seq_lens_output sums to {limit}"},
};

}  // namespace

// input_ids:        [>=bsz, L_in] int64, read (prefill tokens; L_in = the offsets' width)
// draft_tokens:     [>=bsz, Kd] int64, read (decode tokens)
// cum_offsets:      [>=bsz] int32, read (inclusive cumsum of L_in - seq_len)
// token_num:        one-element int64|int32 on any device, read on the host (T)
// seq_len:          [bsz] or [bsz, 1] int32, read (defines bsz)
// seq_lens_encoder: [>=bsz] int32, read (> 0: prefilling, tokens from input_ids)
// returns           x_remove_padding [T] int64, batch_id_per_token [T] int32,
//                   cu_seqlens_q [bsz + 1] int32, cu_seqlens_k [bsz + 1] int32
std::vector<paddle::Tensor> SpeculateGetPaddingOffset(const paddle::Tensor& input_ids,
                                                      const paddle::Tensor& draft_tokens,
                                                      const paddle::Tensor& cum_offsets,
                                                      const paddle::Tensor& token_num,
                                                      const paddle::Tensor& seq_len,
                                                      const paddle::Tensor& seq_lens_encoder) {
  using namespace fd_mtp;
  constexpr const char* kOp = "speculate_get_padding_offset";
  const int64_t bsz =
      packing::per_request(kOp, "seq_len", seq_len, DataType::INT32, 0, "seq_len");
  const int64_t l_in = check::matrix(kOp, "input_ids", input_ids, DataType::INT64, bsz, 0);
  const int64_t kd = check::matrix(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz, 0);
  packing::per_request(kOp, "cum_offsets", cum_offsets, DataType::INT32, bsz, "seq_len");
  packing::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz, "seq_len");
  check::same_place(kOp, "input_ids", input_ids,
                    {{"draft_tokens", &draft_tokens},
                     {"cum_offsets", &cum_offsets},
                     {"seq_len", &seq_len},
                     {"seq_lens_encoder", &seq_lens_encoder}});
  const int64_t t = packing::host_count(kOp, "token_num", token_num);

  auto x = paddle::empty({t}, DataType::INT64, input_ids.place());
  auto batch_id = paddle::empty({t}, DataType::INT32, input_ids.place());
  auto cu_q = paddle::empty({bsz + 1}, DataType::INT32, input_ids.place());
  auto cu_k = paddle::empty({bsz + 1}, DataType::INT32, input_ids.place());
  const PaddingOffsetParams p{input_ids.data<int64_t>(),    l_in,
                              draft_tokens.data<int64_t>(), kd,
                              cum_offsets.data<int32_t>(),  seq_len.data<int32_t>(),
                              seq_lens_encoder.data<int32_t>(), bsz,
                              t,                            x.data<int64_t>(),
                              batch_id.data<int32_t>(),     cu_q.data<int32_t>(),
                              cu_k.data<int32_t>()};
#ifdef PADDLE_WITH_CUDA
  if (input_ids.is_gpu()) {
    GpuScratch scratch(input_ids);
    check::cuda(kOp, speculate_get_padding_offset_cuda(p, scratch.status(), scratch.count(),
                                                       input_ids.stream()));
    check::status(kOp, scratch.fetch(input_ids.stream()).status, kPaddingStatus);
    return {x, batch_id, cu_q, cu_k};
  }
#endif
  if (!input_ids.is_cpu()) check::unsupported_place(kOp, "input_ids", input_ids);
  check::status(kOp, speculate_get_padding_offset_cpu(p), kPaddingStatus);
  return {x, batch_id, cu_q, cu_k};
}

// seq_lens_this_time: [bsz] or [bsz, 1] int32, read (defines bsz)
// seq_lens_encoder:   [>=bsz] int32, read
// seq_lens_decoder:   [>=bsz] int32, unused
// returns             seq_lens_output [bsz] int32
std::vector<paddle::Tensor> SpeculateGetSeqLensOutput(const paddle::Tensor& seq_lens_this_time,
                                                      const paddle::Tensor& seq_lens_encoder,
                                                      const paddle::Tensor& seq_lens_decoder) {
  using namespace fd_mtp;
  constexpr const char* kOp = "speculate_get_seq_lens_output";
  const char* src = "seq_lens_this_time";
  const int64_t bsz =
      packing::per_request(kOp, src, seq_lens_this_time, DataType::INT32, 0, src);
  packing::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz, src);
  packing::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz, src);
  check::same_place(kOp, src, seq_lens_this_time,
                    {{"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder}});
  auto out = paddle::empty({bsz}, DataType::INT32, seq_lens_this_time.place());
  const SeqLensOutputParams p{seq_lens_this_time.data<int32_t>(),
                              seq_lens_encoder.data<int32_t>(), out.data<int32_t>(), bsz};
#ifdef PADDLE_WITH_CUDA
  if (seq_lens_this_time.is_gpu()) {
    check::cuda(kOp, speculate_get_seq_lens_output_cuda(p, seq_lens_this_time.stream()));
    return {out};
  }
#endif
  if (!seq_lens_this_time.is_cpu()) check::unsupported_place(kOp, src, seq_lens_this_time);
  speculate_get_seq_lens_output_cpu(p);
  return {out};
}

// output_cum_offsets_tmp: [bsz] int32, read (inclusive cumsum of max_seq_len - seq_lens_output;
//                         defines bsz)
// out_token_num:          one-element int64|int32 on any device, read on the host (To)
// seq_lens_output:        [>=bsz] int32, read
// max_seq_len:            int attribute (the L_in the offsets are built with)
// returns                 output_padding_offset [To] int32, output_cum_offsets [bsz] int32
std::vector<paddle::Tensor> SpeculateGetOutputPaddingOffset(
    const paddle::Tensor& output_cum_offsets_tmp, const paddle::Tensor& out_token_num,
    const paddle::Tensor& seq_lens_output, int max_seq_len) {
  using namespace fd_mtp;
  constexpr const char* kOp = "speculate_get_output_padding_offset";
  const char* src = "output_cum_offsets_tmp";
  const int64_t bsz =
      packing::per_request(kOp, src, output_cum_offsets_tmp, DataType::INT32, 0, src);
  packing::per_request(kOp, "seq_lens_output", seq_lens_output, DataType::INT32, bsz, src);
  check::same_place(kOp, src, output_cum_offsets_tmp, {{"seq_lens_output", &seq_lens_output}});
  if (max_seq_len < 1) check::fail(kOp, "max_seq_len", "must be >= 1, got ", max_seq_len);
  const int64_t to = packing::host_count(kOp, "out_token_num", out_token_num);

  const auto place = output_cum_offsets_tmp.place();
  auto padding = paddle::empty({to}, DataType::INT32, place);
  auto cum = paddle::empty({bsz}, DataType::INT32, place);
  const OutputPaddingOffsetParams p{output_cum_offsets_tmp.data<int32_t>(),
                                    seq_lens_output.data<int32_t>(),
                                    bsz,
                                    max_seq_len,
                                    to,
                                    padding.data<int32_t>(),
                                    cum.data<int32_t>()};
#ifdef PADDLE_WITH_CUDA
  if (output_cum_offsets_tmp.is_gpu()) {
    GpuScratch scratch(output_cum_offsets_tmp);
    check::cuda(kOp, speculate_get_output_padding_offset_cuda(
                         p, scratch.status(), scratch.count(), output_cum_offsets_tmp.stream()));
    check::status(kOp, scratch.fetch(output_cum_offsets_tmp.stream()).status, kOutputStatus);
    return {padding, cum};
  }
#endif
  if (!output_cum_offsets_tmp.is_cpu())
    check::unsupported_place(kOp, src, output_cum_offsets_tmp);
  check::status(kOp, speculate_get_output_padding_offset_cpu(p), kOutputStatus);
  return {padding, cum};
}

namespace {
using Shape = std::vector<int64_t>;
using Dt = paddle::DataType;

std::vector<Shape> PaddingOffsetShape(const Shape&, const Shape&, const Shape&, const Shape&,
                                      const Shape& seq_len, const Shape&) {
  const int64_t bsz = seq_len.empty() ? -1 : seq_len[0];
  const int64_t cu = bsz < 0 ? -1 : bsz + 1;
  return {{-1}, {-1}, {cu}, {cu}};
}
std::vector<Dt> PaddingOffsetDtype(const Dt&, const Dt&, const Dt&, const Dt&, const Dt&,
                                   const Dt&) {
  return {Dt::INT64, Dt::INT32, Dt::INT32, Dt::INT32};
}
std::vector<Shape> SeqLensOutputShape(const Shape& this_time, const Shape&, const Shape&) {
  return {{this_time.empty() ? -1 : this_time[0]}};
}
std::vector<Dt> SeqLensOutputDtype(const Dt&, const Dt&, const Dt&) { return {Dt::INT32}; }
std::vector<Shape> OutputPaddingOffsetShape(const Shape& tmp, const Shape&, const Shape&) {
  return {{-1}, {tmp.empty() ? -1 : tmp[0]}};
}
std::vector<Dt> OutputPaddingOffsetDtype(const Dt&, const Dt&, const Dt&) {
  return {Dt::INT32, Dt::INT32};
}
}  // namespace

PD_BUILD_OP(fd_mtp_speculate_get_padding_offset)
    .Inputs({"input_ids", "draft_tokens", "cum_offsets", "token_num", "seq_len",
             "seq_lens_encoder"})
    .Outputs({"x_remove_padding", "batch_id_per_token", "cu_seqlens_q", "cu_seqlens_k"})
    .SetKernelFn(PD_KERNEL(SpeculateGetPaddingOffset))
    .SetInferShapeFn(PD_INFER_SHAPE(PaddingOffsetShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(PaddingOffsetDtype));

PD_BUILD_OP(fd_mtp_speculate_get_seq_lens_output)
    .Inputs({"seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder"})
    .Outputs({"seq_lens_output"})
    .SetKernelFn(PD_KERNEL(SpeculateGetSeqLensOutput))
    .SetInferShapeFn(PD_INFER_SHAPE(SeqLensOutputShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(SeqLensOutputDtype));

PD_BUILD_OP(fd_mtp_speculate_get_output_padding_offset)
    .Inputs({"output_cum_offsets_tmp", "out_token_num", "seq_lens_output"})
    .Outputs({"output_padding_offset", "output_cum_offsets"})
    .Attrs({"max_seq_len: int"})
    .SetKernelFn(PD_KERNEL(SpeculateGetOutputPaddingOffset))
    .SetInferShapeFn(PD_INFER_SHAPE(OutputPaddingOffsetShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(OutputPaddingOffsetDtype));
