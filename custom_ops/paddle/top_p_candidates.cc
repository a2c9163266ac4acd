// fd_mtp_top_p_candidates (spec §5.6). Arguments, checks and registration:
// fd_mtp/schema/sampling.py (generated into top_p_candidates.gen.h).
#include "top_p_candidates.gen.h"

// returns verify_scores [T, C] probs dtype, verify_tokens [T, C] int64,
//         actual_candidate_lens [T] int32 (new tensors)
std::vector<paddle::Tensor> top_p_candidates_apply(TopPCandidatesArgs& a,
                                                   fd_mtp::TopPCandidatesParams& p) {
  using namespace fd_mtp;
  const auto& probs = a.probs;
  check::dtype(a.op, "top_p", a.top_p, probs.dtype());  // top_p has the probs' dtype
  if (!top_p_candidates_len_ok(a.candidates_len))
    check::fail(a.op, "candidates_len", "must be 1..10 or a multiple of 10 up to 100, got ",
                a.candidates_len);
  if (a.candidates_len > a.dims.V)
    check::fail(a.op, "candidates_len", "is ", a.candidates_len, " but probs has only ", a.dims.V,
                " columns");

  const int64_t rows = a.dims.T;
  const int64_t c = a.candidates_len;
  auto scores = compat::empty({rows, c}, probs.dtype(), probs.place());
  auto tokens = compat::empty({rows, c}, paddle::DataType::INT64, probs.place());
  auto actual = compat::empty({rows}, paddle::DataType::INT32, probs.place());
  p.probs = probs.data();
  p.float_kind = check::float_kind_of(probs);
  p.top_p = a.top_p.data();
  p.verify_scores = scores.data();
  p.verify_tokens = tokens.data<int64_t>();
  p.actual_candidate_lens = actual.data<int32_t>();
  if (rows == 0) return {scores, tokens, actual};
  if (probs.is_cpu()) {
    check::status(a.op, top_p_candidates_cpu(p), kTopPCandidatesStatus);
    return {scores, tokens, actual};
  }
#ifdef PADDLE_WITH_CUDA
  gpu::Op g(a.op, kTopPCandidatesStreamOp, probs);
  check::cuda(a.op, top_p_candidates_cuda(p, g.status(), g.stream()));
  g.commit();
  return {scores, tokens, actual};
#else
  check::unsupported_place(a.op, "probs", probs);
#endif
}

std::vector<std::vector<int64_t>> top_p_candidates_infer_shape(
    const std::vector<int64_t>& probs_shape, const std::vector<int64_t>&,
    const std::vector<int64_t>&, int candidates_len, int) {
  const int64_t rows = probs_shape.empty() ? -1 : probs_shape[0];
  return {{rows, candidates_len}, {rows, candidates_len}, {rows}};
}

std::vector<paddle::DataType> top_p_candidates_infer_dtype(const paddle::DataType& probs_dtype,
                                                           const paddle::DataType&,
                                                           const paddle::DataType&) {
  return {probs_dtype, paddle::DataType::INT64, paddle::DataType::INT32};
}
