// fd_mtp_decoder_layer: one dense ERNIE-4.5 decoder layer on the CPU (fd_mtp.model's native
// forward). Arguments, checks and registration: fd_mtp/schema/attention.py (generated into
// decoder_layer.gen.h); the maths: custom_ops/kernels/decoder_layer.h.
#include "decoder_layer.gen.h"

#include "cpu_pool.h"

std::vector<paddle::Tensor> decoder_layer_apply(DecoderLayerArgs& a,
                                                fd_mtp::DecoderLayerParams& p) {
  using namespace fd_mtp;
  using paddle::DataType;
  const int64_t tokens = a.dims.T, hidden = a.dims.H, hkv = a.dims.Hkv, dim = a.dims.D;
  // Shape relations the schema cannot express.
  if (dim % 2 != 0 || a.dims.D2 * 2 != dim)
    check::fail(a.op, "rope_cos", "must be [", tokens, ", D / 2] with an even head_dim D = ", dim,
                " (the caches' last axis), got shape ", check::shape_str(a.rope_cos.shape()));
  if (a.dims.QD % dim != 0 || (a.dims.QD / dim) % hkv != 0)
    check::fail(a.op, "q_weight", "must be [", hidden, ", Hq * ", dim, "] with Hkv = ", hkv,
                " dividing Hq, got shape ", check::shape_str(a.q_weight.shape()));
  if (a.dims.KD != hkv * dim)
    check::fail(a.op, "k_weight", "must be [", hidden, ", ", hkv * dim,
                "] (the caches' kv heads x head_dim), got shape ",
                check::shape_str(a.k_weight.shape()));
  const int64_t bsz = check::paged_batch(a.op, a.cu_seqlens_q, a.block_tables, a.seq_lens_decoder,
                                         a.batch_id_per_token, tokens, "hidden");
  if (!a.hidden.is_cpu()) check::unsupported_place(a.op, "hidden", a.hidden);

  p.bsz = bsz;
  p.q_heads = a.dims.QD / dim;
  p.avx2 = cpu_gemm::cpu_has_avx2_fma();
  p.pool = cpu_pool(a.num_threads);
  auto out = compat::empty({tokens, hidden}, DataType::FLOAT32, a.hidden.place());
  auto residual_out = compat::empty({tokens, hidden}, DataType::FLOAT32, a.hidden.place());
  auto workspace =
      compat::empty({decoder_layer_workspace_floats(tokens, hidden, p.q_heads, hkv, dim, a.dims.I)},
                    DataType::FLOAT32, a.hidden.place());
  p.workspace = workspace.data<float>();
  p.out = out.data<float>();
  p.residual_out = residual_out.data<float>();
  check::status(a.op, decoder_layer_cpu(p), kDecoderLayerStatus);
  return {out, residual_out};
}

std::vector<std::vector<int64_t>> decoder_layer_infer_shape(
    const std::vector<int64_t>& hidden_shape, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, float, float, int) {
  return {hidden_shape, hidden_shape};
}

std::vector<paddle::DataType> decoder_layer_infer_dtype(
    const paddle::DataType& hidden_dtype, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&) {
  return {hidden_dtype, hidden_dtype};
}
