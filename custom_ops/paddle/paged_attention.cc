// fd_mtp_paged_attention: paged KV-cache attention of one packed batch (the
// float32 kernel of fd_mtp.model's PagedAttentionCPU). Declared in
// fd_mtp/schema/attention.py; this binding stays hand-written (see there why).
#include "check.h"
#include "gpu_scratch.h"
#include "ops.h"
#include "../kernels/paged_attention.h"

namespace {
using paddle::DataType;

constexpr fd_mtp::StatusInfo kStatus[] = {
    {fd_mtp::kPagedBatchId, "batch_id_per_token",
     "names request {value} but the batch has {limit} requests"},
    {fd_mtp::kPagedTokenIndex, "batch_id_per_token",
     "does not match cu_seqlens_q: token {value} is outside its request's range (which ends at "
     "{limit})"},
    {fd_mtp::kPagedDecoder, "seq_lens_decoder", "is {value}, must be >= {limit}"},
    {fd_mtp::kPagedTableWidth, "block_tables",
     "is too narrow: position {value} is needed but the table covers {limit} positions"},
    {fd_mtp::kPagedBlockId, "block_tables",
     "holds block id {value} for a needed position; valid block ids are [0, {limit})"},
};

void check_3d(const char* op, const char* arg, const paddle::Tensor& t) {
  fd_mtp::check::dtype(op, arg, t, DataType::FLOAT32);
  if (t.shape().size() != 3)
    fd_mtp::check::fail(op, arg, "must be 3-D [tokens, heads, head_dim], got shape ",
                        fd_mtp::check::shape_str(t.shape()));
}

}  // namespace

// q:                  [T, Hq, D] float32, read
// k, v:               [T, Hkv, D] float32, read (Hkv divides Hq)
// key_cache:          [num_blocks, Hkv, block_size, D] float32, written (the new k rows)
// value_cache:        [num_blocks, Hkv, block_size, D] float32, written (the new v rows)
// block_tables:       [>=bsz, NB] int32, read
// cu_seqlens_q:       [bsz + 1] int32, read (defines bsz)
// batch_id_per_token: [>=T] int32, read
// seq_lens_decoder:   [>=bsz] int32, read (position of each request's first token)
// scale:              float attribute (scores are q.k * scale)
// returns             out [T, Hq * D] float32
std::vector<paddle::Tensor> PagedAttention(const paddle::Tensor& q, const paddle::Tensor& k,
                                           const paddle::Tensor& v, paddle::Tensor& key_cache,
                                           paddle::Tensor& value_cache,
                                           const paddle::Tensor& block_tables,
                                           const paddle::Tensor& cu_seqlens_q,
                                           const paddle::Tensor& batch_id_per_token,
                                           const paddle::Tensor& seq_lens_decoder, float scale) {
  using namespace fd_mtp;
  constexpr const char* kOp = "paged_attention";
  check_3d(kOp, "q", q);
  check_3d(kOp, "k", k);
  check_3d(kOp, "v", v);
  const int64_t tokens = q.shape()[0], hq = q.shape()[1], dim = q.shape()[2];
  const int64_t hkv = k.shape()[1];
  if (k.shape()[0] != tokens || k.shape()[2] != dim || hkv < 1 || hq % hkv != 0)
    check::fail(kOp, "k", "must be [", tokens, ", Hkv, ", dim, "] with Hkv dividing ", hq,
                ", got shape ", check::shape_str(k.shape()));
  if (v.shape() != k.shape())
    check::fail(kOp, "v", "must have k's shape ", check::shape_str(k.shape()), ", got ",
                check::shape_str(v.shape()));
  check::dtype(kOp, "key_cache", key_cache, DataType::FLOAT32);
  const auto& cs = key_cache.shape();
  if (cs.size() != 4 || cs[1] != hkv || cs[2] < 1 || cs[3] != dim)
    check::fail(kOp, "key_cache", "must be [num_blocks, ", hkv, ", block_size, ", dim,
                "], got shape ", check::shape_str(cs));
  check::dtype(kOp, "value_cache", value_cache, DataType::FLOAT32);
  if (value_cache.shape() != cs)
    check::fail(kOp, "value_cache", "must have key_cache's shape ", check::shape_str(cs),
                ", got ", check::shape_str(value_cache.shape()));
  check::dtype(kOp, "cu_seqlens_q", cu_seqlens_q, DataType::INT32);
  if (cu_seqlens_q.shape().size() != 1 || cu_seqlens_q.shape()[0] < 1)
    check::fail(kOp, "cu_seqlens_q", "must have shape [bsz + 1], got ",
                check::shape_str(cu_seqlens_q.shape()));
  const int64_t bsz = cu_seqlens_q.shape()[0] - 1;
  const int64_t width = check::matrix(kOp, "block_tables", block_tables, DataType::INT32, bsz);
  check::per_request_from(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz,
                          "cu_seqlens_q");
  check::dtype(kOp, "batch_id_per_token", batch_id_per_token, DataType::INT32);
  if (batch_id_per_token.numel() < tokens)
    check::fail(kOp, "batch_id_per_token", "has ", batch_id_per_token.numel(),
                " entries but q has ", tokens, " tokens");
  check::same_place(kOp, "q", q,
                    {{"k", &k},
                     {"v", &v},
                     {"key_cache", &key_cache},
                     {"value_cache", &value_cache},
                     {"block_tables", &block_tables},
                     {"cu_seqlens_q", &cu_seqlens_q},
                     {"batch_id_per_token", &batch_id_per_token},
                     {"seq_lens_decoder", &seq_lens_decoder}});

  auto out = paddle::empty({tokens, hq * dim}, DataType::FLOAT32, q.place());
  const PagedAttentionParams p{q.data<float>(),
                               k.data<float>(),
                               v.data<float>(),
                               key_cache.data<float>(),
                               value_cache.data<float>(),
                               block_tables.data<int32_t>(),
                               cu_seqlens_q.data<int32_t>(),
                               batch_id_per_token.data<int32_t>(),
                               seq_lens_decoder.data<int32_t>(),
                               tokens,
                               bsz,
                               hq,
                               hkv,
                               dim,
                               cs[0],
                               cs[2],
                               width,
                               scale,
                               out.data<float>()};
#ifdef PADDLE_WITH_CUDA
  if (q.is_gpu()) {
    GpuScratch scratch(q);
    check::cuda(kOp, paged_attention_cuda(p, scratch.status(), q.stream()));
    check::status(kOp, scratch.fetch(q.stream()).status, kStatus);
    return {out};
  }
#endif
  if (!q.is_cpu()) check::unsupported_place(kOp, "q", q);
  check::status(kOp, paged_attention_cpu(p), kStatus);
  return {out};
}

namespace {
using Shape = std::vector<int64_t>;

std::vector<Shape> PagedAttentionShape(const Shape& q, const Shape&, const Shape&, const Shape&,
                                       const Shape&, const Shape&, const Shape&, const Shape&,
                                       const Shape&) {
  if (q.size() != 3) return {{-1, -1}};
  return {{q[0], q[1] * q[2]}};
}

std::vector<paddle::DataType> PagedAttentionDtype(
    const paddle::DataType& q, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&) {
  return {q};
}
}  // namespace

PD_BUILD_OP(fd_mtp_paged_attention)
    .Inputs({"q", "k", "v", "key_cache", "value_cache", "block_tables", "cu_seqlens_q",
             "batch_id_per_token", "seq_lens_decoder"})
    .Outputs({"out", "key_cache_out", "value_cache_out"})
    .Attrs({"scale: float"})
    .SetInplaceMap({{"key_cache", "key_cache_out"}, {"value_cache", "value_cache_out"}})
    .SetKernelFn(PD_KERNEL(PagedAttention))
    .SetInferShapeFn(PD_INFER_SHAPE(PagedAttentionShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(PagedAttentionDtype));
