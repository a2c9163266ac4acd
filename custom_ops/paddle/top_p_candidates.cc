// fd_mtp_top_p_candidates (spec §5.6)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/top_p_candidates.h"

namespace {
constexpr const char* kOp = "top_p_candidates";
using paddle::DataType;

constexpr fd_mtp::StatusInfo kStatus[] = {
    {fd_mtp::kTopPNegativeRow, "output_padding_offset",
     "gives probs row {value} the offset {limit}: a negative position"},
    {fd_mtp::kTopPRequestRow, "output_padding_offset",
     "maps a probs row to request {value} but top_p has {limit} entries"},
};
}  // namespace

// probs:                 [T, V] float32|float16|bfloat16, read
// top_p:                 [bs] (or [bs, 1]) probs dtype, read
// output_padding_offset: [>=T] int32, read
// returns verify_scores [T, C] probs dtype, verify_tokens [T, C] int64,
//         actual_candidate_lens [T] int32 (new tensors)
std::vector<paddle::Tensor> TopPCandidates(const paddle::Tensor& probs,
                                           const paddle::Tensor& top_p,
                                           const paddle::Tensor& output_padding_offset,
                                           int candidates_len, int max_seq_len) {
  using namespace fd_mtp;
  check::dtype_in(kOp, "probs", probs, {DataType::FLOAT32, DataType::FLOAT16, DataType::BFLOAT16});
  if (probs.shape().size() != 2)
    check::fail(kOp, "probs", "must be 2-D [tokens, vocab], got shape ",
                check::shape_str(probs.shape()));
  const int64_t rows = probs.shape()[0];
  const int64_t vocab = probs.shape()[1];
  const int64_t bs = check::per_request(kOp, "top_p", top_p, probs.dtype(), 0);
  check::per_row(kOp, "output_padding_offset", output_padding_offset, DataType::INT32, rows,
                 "probs");
  if (!top_p_candidates_len_ok(candidates_len))
    check::fail(kOp, "candidates_len", "must be 1..10 or a multiple of 10 up to 100, got ",
                candidates_len);
  if (candidates_len > vocab)
    check::fail(kOp, "candidates_len", "is ", candidates_len, " but probs has only ", vocab,
                " columns");
  if (max_seq_len < 1) check::fail(kOp, "max_seq_len", "must be >= 1, got ", max_seq_len);
  check::same_place(kOp, "probs", probs,
                    {{"top_p", &top_p}, {"output_padding_offset", &output_padding_offset}});

  const int64_t c = candidates_len;
  auto scores = paddle::empty({rows, c}, probs.dtype(), probs.place());
  auto tokens = paddle::empty({rows, c}, DataType::INT64, probs.place());
  auto actual = paddle::empty({rows}, DataType::INT32, probs.place());
  TopPCandidatesParams p{};
  p.probs = probs.data();
  p.rows = rows;
  p.vocab = vocab;
  p.float_kind = check::float_kind_of(probs);
  p.top_p = top_p.data();
  p.bs = bs;
  p.output_padding_offset = output_padding_offset.data<int32_t>();
  p.candidates = c;
  p.max_seq_len = max_seq_len;
  p.verify_scores = scores.data();
  p.verify_tokens = tokens.data<int64_t>();
  p.actual_candidate_lens = actual.data<int32_t>();
  if (rows == 0) return {scores, tokens, actual};
  if (probs.is_cpu()) {
    check::status(kOp, top_p_candidates_cpu(p), kStatus);
    return {scores, tokens, actual};
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(probs);
  check::cuda(kOp, top_p_candidates_cuda(p, scratch.status(), probs.stream()));
  check::status(kOp, scratch.fetch(probs.stream()).status, kStatus);
  return {scores, tokens, actual};
#else
  check::unsupported_place(kOp, "probs", probs);
#endif
}

namespace {
std::vector<std::vector<int64_t>> TopPCandidatesShape(const std::vector<int64_t>& probs,
                                                      const std::vector<int64_t>&,
                                                      const std::vector<int64_t>&,
                                                      int candidates_len, int) {
  const int64_t rows = probs.empty() ? -1 : probs[0];
  return {{rows, candidates_len}, {rows, candidates_len}, {rows}};
}
std::vector<paddle::DataType> TopPCandidatesDtype(const paddle::DataType& probs,
                                                  const paddle::DataType&,
                                                  const paddle::DataType&) {
  return {probs, paddle::DataType::INT64, paddle::DataType::INT32};
}
}  // namespace

PD_BUILD_OP(fd_mtp_top_p_candidates)
    .Inputs({"probs", "top_p", "output_padding_offset"})
    .Outputs({"verify_scores", "verify_tokens", "actual_candidate_lens"})
    .Attrs({"candidates_len: int", "max_seq_len: int"})
    .SetKernelFn(PD_KERNEL(TopPCandidates))
    .SetInferShapeFn(PD_INFER_SHAPE(TopPCandidatesShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(TopPCandidatesDtype));
