// fd_mtp_paged_attention: paged KV-cache attention of one packed batch (the float32 kernel of
// fd_mtp.model's PagedAttentionCPU). Arguments, checks and registration: fd_mtp/schema/attention.py
// (generated into paged_attention.gen.h).
#include "paged_attention.gen.h"

std::vector<paddle::Tensor> paged_attention_apply(PagedAttentionArgs& a,
                                                  fd_mtp::PagedAttentionParams& p) {
  using namespace fd_mtp;
  using paddle::DataType;
  const int64_t tokens = a.dims.T, hq = a.dims.Hq, hkv = a.dims.Hkv, dim = a.dims.D;
  // Shape relations the schema cannot express (messages of the former binding).
  if (hq % hkv != 0)
    check::fail(a.op, "k", "must be [", tokens, ", Hkv, ", dim, "] with Hkv dividing ", hq,
                ", got shape ", check::shape_str(a.k.shape()));
  if (a.dims.Hv != hkv)
    check::fail(a.op, "v", "must have k's shape ", check::shape_str(a.k.shape()), ", got ",
                check::shape_str(a.v.shape()));
  if (a.dims.Hc != hkv)
    check::fail(a.op, "key_cache", "must be [num_blocks, ", hkv, ", block_size, ", dim,
                "], got shape ", check::shape_str(a.key_cache.shape()));
  const int64_t bsz = check::paged_batch(a.op, a.cu_seqlens_q, a.block_tables, a.seq_lens_decoder,
                                         a.batch_id_per_token, tokens, "q");

  auto out = compat::empty({tokens, hq * dim}, DataType::FLOAT32, a.q.place());
  p.bsz = bsz;
  p.out = out.data<float>();
#ifdef PADDLE_WITH_CUDA
  if (a.q.is_gpu()) {
    gpu::Op g(a.op, kPagedAttentionStreamOp, a.q);
    check::cuda(a.op, paged_attention_cuda(p, g.status(), g.stream()));
    g.commit();
    return {out};
  }
#endif
  if (!a.q.is_cpu()) check::unsupported_place(a.op, "q", a.q);
  check::status(a.op, paged_attention_cpu(p), kPagedAttentionStatus);
  return {out};
}

std::vector<std::vector<int64_t>> paged_attention_infer_shape(
    const std::vector<int64_t>& q_shape, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&, float) {
  if (q_shape.size() != 3) return {{-1, -1}};
  return {{q_shape[0], q_shape[1] * q_shape[2]}};
}

std::vector<paddle::DataType> paged_attention_infer_dtype(
    const paddle::DataType& q_dtype, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&) {
  return {q_dtype};
}
