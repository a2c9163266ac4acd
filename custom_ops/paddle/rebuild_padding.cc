// fd_mtp_rebuild_padding (spec §5.4): the hidden-state rows that get logits.
#include "gpu_scratch.h"
#include "ops.h"
#include "packing_check.h"
#include "../kernels/rebuild_padding.h"

namespace {
using paddle::DataType;

constexpr fd_mtp::StatusInfo kStatus[] = {
    {fd_mtp::kRebuildRequest, "output_padding_offset",
     "maps an output row to request {value} but the batch has {limit} requests (check "
     "max_input_length: it must be the width the offsets were built with)"},
    {fd_mtp::kRebuildSourceRow, "cu_seqlens_q",
     "with seq_lens_encoder selects tmp_out row {value} but tmp_out has {limit} rows"},
};

}  // namespace

// tmp_out:               [T, H] float32|float16|bfloat16, read (packed model output)
// cu_seqlens_q:          [bsz + 1] int32, read (defines bsz)
// seq_len_this_time:     [>=bsz] int32, read
// seq_lens_decoder:      [>=bsz] int32, read
// seq_lens_encoder:      [>=bsz] int32, read (copied to the host for R)
// output_padding_offset: optional [>=R] int32, read (speculative branch)
// first_token_out:       optional, unused (accepted for the signature)
// max_input_length:      int attribute (the width the offsets were built with)
// enable_logprob:        bool attribute, unused
// use_output_padding_offset: bool attribute: the speculative branch. The Python wrapper sets it to
//                        `output_padding_offset is not None`: paddle hands a zero-size tensor
//                        (no logits rows this step) to an optional input as "none", which must
//                        not switch to the plain branch.
// returns                out [R, H] (speculative) or [bsz, H] (plain), tmp_out's dtype
std::vector<paddle::Tensor> RebuildPadding(
    const paddle::Tensor& tmp_out, const paddle::Tensor& cu_seqlens_q,
    const paddle::Tensor& seq_len_this_time, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& seq_lens_encoder,
    const paddle::optional<paddle::Tensor>& output_padding_offset,
    const paddle::optional<paddle::Tensor>& first_token_out, int max_input_length,
    bool enable_logprob, bool use_output_padding_offset) {
  using namespace fd_mtp;
  constexpr const char* kOp = "rebuild_padding";
  check::dtype_in(kOp, "tmp_out", tmp_out,
                  {DataType::FLOAT32, DataType::FLOAT16, DataType::BFLOAT16});
  if (tmp_out.shape().size() != 2)
    check::fail(kOp, "tmp_out", "must be 2-D [tokens, hidden], got shape ",
                check::shape_str(tmp_out.shape()));
  check::dtype(kOp, "cu_seqlens_q", cu_seqlens_q, DataType::INT32);
  if (cu_seqlens_q.shape().size() != 1 || cu_seqlens_q.shape()[0] < 1)
    check::fail(kOp, "cu_seqlens_q", "must have shape [bsz + 1], got ",
                check::shape_str(cu_seqlens_q.shape()));
  const int64_t bsz = cu_seqlens_q.shape()[0] - 1;
  const char* src = "cu_seqlens_q";
  packing::per_request(kOp, "seq_len_this_time", seq_len_this_time, DataType::INT32, bsz, src);
  packing::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz, src);
  packing::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz, src);
  check::same_place(kOp, "tmp_out", tmp_out,
                    {{"cu_seqlens_q", &cu_seqlens_q},
                     {"seq_len_this_time", &seq_len_this_time},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"seq_lens_encoder", &seq_lens_encoder}});
  const int64_t rows = tmp_out.shape()[0];
  const int64_t hidden = tmp_out.shape()[1];

  int64_t out_rows = bsz;
  const int32_t* offsets = nullptr;
  if (use_output_padding_offset) {
    const bool given = static_cast<bool>(output_padding_offset);  // false: zero-size
    if (given) {
      check::dtype(kOp, "output_padding_offset", *output_padding_offset, DataType::INT32);
      check::same_place(kOp, "output_padding_offset", *output_padding_offset, tmp_out, "tmp_out");
    }
    const int64_t entries = given ? output_padding_offset->numel() : 0;
    if (max_input_length < 1)
      check::fail(kOp, "max_input_length", "must be >= 1, got ", max_input_length);
    // R on the host, as upstream (one row per prefilling request, assuming
    // seq_len_this_time == seq_lens_encoder for it).
    const paddle::Tensor enc_host =
        seq_lens_encoder.is_cpu() ? seq_lens_encoder
                                  : seq_lens_encoder.copy_to(paddle::CPUPlace(), true);
    out_rows = rebuild_padding_rows(rows, enc_host.data<int32_t>(), bsz);
    if (out_rows < 0)
      check::fail(kOp, "seq_lens_encoder", "sums to more prefill tokens than tmp_out has rows (",
                  rows, "): the output would have ", out_rows, " rows");
    if (entries < out_rows)
      check::fail(kOp, "output_padding_offset", "has ", entries,
                  " entries but the output has R = ", out_rows,
                  " rows (R = T - sum of (seq_lens_encoder - 1) over prefilling requests, which "
                  "assumes seq_len_this_time == seq_lens_encoder for them)");
    if (out_rows > 0) offsets = output_padding_offset->data<int32_t>();
  }

  auto out = paddle::empty({out_rows, hidden}, tmp_out.dtype(), tmp_out.place());
  const RebuildPaddingParams p{tmp_out.data(),
                               rows,
                               hidden * static_cast<int64_t>(phi::SizeOf(tmp_out.dtype())),
                               cu_seqlens_q.data<int32_t>(),
                               seq_len_this_time.data<int32_t>(),
                               seq_lens_decoder.data<int32_t>(),
                               seq_lens_encoder.data<int32_t>(),
                               offsets,
                               bsz,
                               max_input_length,
                               out_rows,
                               out.data()};
#ifdef PADDLE_WITH_CUDA
  if (tmp_out.is_gpu()) {
    GpuScratch scratch(tmp_out);
    check::cuda(kOp, rebuild_padding_cuda(p, scratch.status(), tmp_out.stream()));
    check::status(kOp, scratch.fetch(tmp_out.stream()).status, kStatus);
    return {out};
  }
#endif
  if (!tmp_out.is_cpu()) check::unsupported_place(kOp, "tmp_out", tmp_out);
  check::status(kOp, rebuild_padding_cpu(p), kStatus);
  return {out};
}

namespace {
using Shape = std::vector<int64_t>;

std::vector<Shape> RebuildPaddingShape(const Shape& tmp_out, const Shape& cu_seqlens_q,
                                       const Shape&, const Shape&, const Shape&,
                                       const paddle::optional<Shape>&,
                                       const paddle::optional<Shape>&, int, bool,
                                       bool use_output_padding_offset) {
  const int64_t hidden = tmp_out.size() == 2 ? tmp_out[1] : -1;
  if (use_output_padding_offset) return {{-1, hidden}};
  return {{cu_seqlens_q.empty() ? -1 : cu_seqlens_q[0] - 1, hidden}};
}

std::vector<paddle::DataType> RebuildPaddingDtype(const paddle::DataType& tmp_out,
                                                  const paddle::DataType&,
                                                  const paddle::DataType&,
                                                  const paddle::DataType&,
                                                  const paddle::DataType&,
                                                  const paddle::optional<paddle::DataType>&,
                                                  const paddle::optional<paddle::DataType>&) {
  return {tmp_out};
}
}  // namespace

PD_BUILD_OP(fd_mtp_rebuild_padding)
    .Inputs({"tmp_out", "cu_seqlens_q", "seq_len_this_time", "seq_lens_decoder",
             "seq_lens_encoder", paddle::Optional("output_padding_offset"),
             paddle::Optional("first_token_out")})
    .Outputs({"out"})
    .Attrs({"max_input_length: int", "enable_logprob: bool", "use_output_padding_offset: bool"})
    .SetKernelFn(PD_KERNEL(RebuildPadding))
    .SetInferShapeFn(PD_INFER_SHAPE(RebuildPaddingShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(RebuildPaddingDtype));
