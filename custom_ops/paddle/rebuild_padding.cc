// fd_mtp_rebuild_padding (spec §5.4): the hidden-state rows that get logits. Arguments, checks
// and registration: fd_mtp/schema/packing.py (generated into rebuild_padding.gen.h).
#include "rebuild_padding.gen.h"
#include "packing_check.h"

// use_output_padding_offset: the speculative branch. The Python wrapper sets it to
// `output_padding_offset is not None`: paddle hands a zero-size tensor (no logits rows this step)
// to an optional input as "none", which must not switch to the plain branch.
std::vector<paddle::Tensor> rebuild_padding_apply(RebuildPaddingArgs& a,
                                                  fd_mtp::RebuildPaddingParams& p) {
  using namespace fd_mtp;
  // cu_seqlens_q: [bsz + 1], defines bsz; the per-request vectors: [>=bsz].
  const auto& cu_shape = a.cu_seqlens_q.shape();
  if (cu_shape.size() != 1 || cu_shape[0] < 1)
    check::fail(a.op, "cu_seqlens_q", "must have shape [bsz + 1], got ",
                check::shape_str(cu_shape));
  const int64_t bsz = cu_shape[0] - 1;
  const char* src = "cu_seqlens_q";
  const auto i32 = paddle::DataType::INT32;
  packing::per_request(a.op, "seq_len_this_time", a.seq_len_this_time, i32, bsz, src);
  packing::per_request(a.op, "seq_lens_decoder", a.seq_lens_decoder, i32, bsz, src);
  packing::per_request(a.op, "seq_lens_encoder", a.seq_lens_encoder, i32, bsz, src);
  const auto& tmp_out = a.tmp_out;
  const int64_t rows = a.dims.T;

  int64_t out_rows = bsz;
  const int32_t* offsets = nullptr;
  if (a.use_output_padding_offset) {
    const bool given = static_cast<bool>(a.output_padding_offset);  // false: zero-size
    const int64_t entries = given ? a.output_padding_offset->numel() : 0;
    if (a.max_input_length < 1)
      check::fail(a.op, "max_input_length", "must be >= 1, got ", a.max_input_length);
    // R on the host, as upstream (one row per prefilling request, assuming
    // seq_len_this_time == seq_lens_encoder for it): a device seq_lens_encoder is read back (the
    // shape read of FastDeploy's op).
    std::vector<int32_t> enc_copy;
    const int32_t* enc = nullptr;
    if (a.seq_lens_encoder.is_cpu()) {
      enc = a.seq_lens_encoder.data<int32_t>();
    } else {
#ifdef PADDLE_WITH_CUDA
      enc_copy.resize(static_cast<size_t>(bsz));
      gpu::read_int32s(a.op, "seq_lens_encoder", a.seq_lens_encoder, bsz, enc_copy.data());
      enc = enc_copy.data();
#else
      check::unsupported_place(a.op, "seq_lens_encoder", a.seq_lens_encoder);
#endif
    }
    out_rows = rebuild_padding_rows(rows, enc, bsz);
    if (out_rows < 0)
      check::fail(a.op, "seq_lens_encoder", "sums to more prefill tokens than tmp_out has rows (",
                  rows, "): the output would have ", out_rows, " rows");
    if (entries < out_rows)
      check::fail(a.op, "output_padding_offset", "has ", entries,
                  " entries but the output has R = ", out_rows,
                  " rows (R = T - sum of (seq_lens_encoder - 1) over prefilling requests, which "
                  "assumes seq_len_this_time == seq_lens_encoder for them)");
    if (out_rows > 0) offsets = a.output_padding_offset->data<int32_t>();
  }

  auto out = compat::empty({out_rows, a.dims.H}, tmp_out.dtype(), tmp_out.place());
  p.tmp_out = tmp_out.data();
  p.row_bytes = a.dims.H * static_cast<int64_t>(phi::SizeOf(tmp_out.dtype()));
  p.output_padding_offset = offsets;
  p.bsz = bsz;
  p.out_rows = out_rows;
  p.out = out.data();
#ifdef PADDLE_WITH_CUDA
  if (tmp_out.is_gpu()) {
    gpu::Op g(a.op, kRebuildPaddingStreamOp, tmp_out);
    check::cuda(a.op, rebuild_padding_cuda(p, g.status(), g.stream()));
    g.commit();
    return {out};
  }
#endif
  if (!tmp_out.is_cpu()) check::unsupported_place(a.op, "tmp_out", tmp_out);
  check::status(a.op, rebuild_padding_cpu(p), kRebuildPaddingStatus);
  return {out};
}

// out: [R, H] (speculative, R known only at run time) or [bsz, H] (plain), tmp_out's dtype.
std::vector<std::vector<int64_t>> rebuild_padding_infer_shape(
    const std::vector<int64_t>& tmp_out_shape, const std::vector<int64_t>& cu_seqlens_q_shape,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const paddle::optional<std::vector<int64_t>>&, const paddle::optional<std::vector<int64_t>>&,
    int, bool, bool use_output_padding_offset) {
  const int64_t hidden = tmp_out_shape.size() == 2 ? tmp_out_shape[1] : -1;
  if (use_output_padding_offset) return {{-1, hidden}};
  return {{cu_seqlens_q_shape.empty() ? -1 : cu_seqlens_q_shape[0] - 1, hidden}};
}

std::vector<paddle::DataType> rebuild_padding_infer_dtype(
    const paddle::DataType& tmp_out_dtype, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::optional<paddle::DataType>&,
    const paddle::optional<paddle::DataType>&) {
  return {tmp_out_dtype};
}
