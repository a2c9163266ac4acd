// fd_mtp_speculate_get_padding_offset (spec §5.1),
// fd_mtp_speculate_get_seq_lens_output (§5.2) and
// fd_mtp_speculate_get_output_padding_offset (§5.3): the packed token layout. Arguments, checks
// and registration: fd_mtp/schema/packing.py (generated into <op>.gen.h).
#include "speculate_get_output_padding_offset.gen.h"
#include "speculate_get_padding_offset.gen.h"
#include "speculate_get_seq_lens_output.gen.h"
#include "packing_check.h"

namespace {
using Shape = std::vector<int64_t>;
using Dt = paddle::DataType;
}  // namespace

// returns x_remove_padding [T] int64, batch_id_per_token [T] int32,
//         cu_seqlens_q [bsz + 1] int32, cu_seqlens_k [bsz + 1] int32
std::vector<paddle::Tensor> speculate_get_padding_offset_apply(SpeculateGetPaddingOffsetArgs& a,
                                                               fd_mtp::PaddingOffsetParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.input_ids;
  const int64_t t = packing::host_count(a.op, "token_num", a.token_num);
  const int64_t bsz = a.dims.B;
  // Zeros, as upstream: entries in gaps between requests (wider slots in cum_offsets) stay 0.
  auto x = compat::full({t}, 0, Dt::INT64, ref.place());
  auto batch_id = compat::full({t}, 0, Dt::INT32, ref.place());
  auto cu_q = compat::empty({bsz + 1}, Dt::INT32, ref.place());
  auto cu_k = compat::empty({bsz + 1}, Dt::INT32, ref.place());
  p.token_num = t;
  p.x_remove_padding = x.data<int64_t>();
  p.batch_id_per_token = batch_id.data<int32_t>();
  p.cu_seqlens_q = cu_q.data<int32_t>();
  p.cu_seqlens_k = cu_k.data<int32_t>();
#ifdef PADDLE_WITH_CUDA
  if (ref.is_gpu()) {
    gpu::Op g(a.op, kSpeculateGetPaddingOffsetStreamOp, ref);
    check::cuda(a.op, speculate_get_padding_offset_cuda(p, g.status(), g.count(), g.stream()));
    g.commit();
    return {x, batch_id, cu_q, cu_k};
  }
#endif
  if (!ref.is_cpu()) check::unsupported_place(a.op, "input_ids", ref);
  check::status(a.op, speculate_get_padding_offset_cpu(p), kSpeculateGetPaddingOffsetStatus);
  return {x, batch_id, cu_q, cu_k};
}

std::vector<Shape> speculate_get_padding_offset_infer_shape(const Shape&, const Shape&,
                                                            const Shape&, const Shape&,
                                                            const Shape& seq_len_shape,
                                                            const Shape&) {
  const int64_t bsz = seq_len_shape.empty() ? -1 : seq_len_shape[0];
  const int64_t cu = bsz < 0 ? -1 : bsz + 1;
  return {{-1}, {-1}, {cu}, {cu}};
}

std::vector<Dt> speculate_get_padding_offset_infer_dtype(const Dt&, const Dt&, const Dt&, const Dt&,
                                                         const Dt&, const Dt&) {
  return {Dt::INT64, Dt::INT32, Dt::INT32, Dt::INT32};
}

// returns seq_lens_output [bsz] int32
std::vector<paddle::Tensor> speculate_get_seq_lens_output_apply(SpeculateGetSeqLensOutputArgs& a,
                                                                fd_mtp::SeqLensOutputParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_this_time;
  auto out = compat::empty({a.dims.B}, Dt::INT32, ref.place());
  p.seq_lens_output = out.data<int32_t>();
#ifdef PADDLE_WITH_CUDA
  if (ref.is_gpu()) {
    check::cuda(a.op, speculate_get_seq_lens_output_cuda(p, gpu::preset(a.op, ref), ref.stream()));
    gpu::finish(a.op, ref);
    return {out};
  }
#endif
  if (!ref.is_cpu()) check::unsupported_place(a.op, "seq_lens_this_time", ref);
  speculate_get_seq_lens_output_cpu(p);
  return {out};
}

std::vector<Shape> speculate_get_seq_lens_output_infer_shape(const Shape& seq_lens_this_time_shape,
                                                             const Shape&, const Shape&) {
  return {{seq_lens_this_time_shape.empty() ? -1 : seq_lens_this_time_shape[0]}};
}

std::vector<Dt> speculate_get_seq_lens_output_infer_dtype(const Dt&, const Dt&, const Dt&) {
  return {Dt::INT32};
}

// returns output_padding_offset [To] int32, output_cum_offsets [bsz] int32
std::vector<paddle::Tensor> speculate_get_output_padding_offset_apply(
    SpeculateGetOutputPaddingOffsetArgs& a, fd_mtp::OutputPaddingOffsetParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.output_cum_offsets_tmp;
  const int64_t to = packing::host_count(a.op, "out_token_num", a.out_token_num);
  auto padding = compat::full({to}, 0, Dt::INT32, ref.place());  // gap rows stay 0
  auto cum = compat::empty({a.dims.B}, Dt::INT32, ref.place());
  p.out_token_num = to;
  p.output_padding_offset = padding.data<int32_t>();
  p.output_cum_offsets = cum.data<int32_t>();
#ifdef PADDLE_WITH_CUDA
  if (ref.is_gpu()) {
    gpu::Op g(a.op, kSpeculateGetOutputPaddingOffsetStreamOp, ref);
    check::cuda(a.op,
                speculate_get_output_padding_offset_cuda(p, g.status(), g.count(), g.stream()));
    g.commit();
    return {padding, cum};
  }
#endif
  if (!ref.is_cpu()) check::unsupported_place(a.op, "output_cum_offsets_tmp", ref);
  check::status(a.op, speculate_get_output_padding_offset_cpu(p),
                kSpeculateGetOutputPaddingOffsetStatus);
  return {padding, cum};
}

std::vector<Shape> speculate_get_output_padding_offset_infer_shape(
    const Shape& output_cum_offsets_tmp_shape, const Shape&, const Shape&, int) {
  return {{-1}, {output_cum_offsets_tmp_shape.empty() ? -1 : output_cum_offsets_tmp_shape[0]}};
}

std::vector<Dt> speculate_get_output_padding_offset_infer_dtype(const Dt&, const Dt&, const Dt&) {
  return {Dt::INT32, Dt::INT32};
}
