// fd_mtp_speculate_get_token_penalty_multi_scores (spec §5.5). Arguments, checks and
// registration: fd_mtp/schema/sampling.py (generated into
// speculate_get_token_penalty_multi_scores.gen.h).
#include "speculate_get_token_penalty_multi_scores.gen.h"

void speculate_get_token_penalty_multi_scores_apply(SpeculateGetTokenPenaltyMultiScoresArgs& a,
                                                    fd_mtp::TokenPenaltyParams& p) {
  using namespace fd_mtp;
  auto& logits = a.logits;
  // The penalty scores have the logits' dtype.
  check::dtype(a.op, "penalty_scores", a.penalty_scores, logits.dtype());
  check::dtype(a.op, "frequency_scores", a.frequency_scores, logits.dtype());
  check::dtype(a.op, "presence_scores", a.presence_scores, logits.dtype());
  // bad_tokens: [Lb] or [rows, Lb]; only its first Lb entries (row 0) are read.
  const auto& bad_shape = a.bad_tokens.shape();
  if (bad_shape.size() != 1 && bad_shape.size() != 2)
    check::fail(a.op, "bad_tokens", "must be [Lb] or [rows, Lb], got shape ",
                check::shape_str(bad_shape));
  p.logits = logits.data();
  p.float_kind = check::float_kind_of(logits);
  p.penalty_scores = a.penalty_scores.data();
  p.frequency_scores = a.frequency_scores.data();
  p.presence_scores = a.presence_scores.data();
  p.num_bad_tokens = a.bad_tokens.numel() == 0 ? 0 : bad_shape.back();
  if (p.rows == 0) return;
  if (logits.is_cpu()) {
    check::status(a.op, token_penalty_cpu(p), kSpeculateGetTokenPenaltyMultiScoresStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  const int64_t ws_rows = token_penalty_workspace_rows(p.rows);
  auto workspace = paddle::full({ws_rows, p.vocab}, 0, paddle::DataType::INT32, logits.place());
  GpuScratch scratch(logits);
  check::cuda(a.op, token_penalty_cuda(p, workspace.data<int32_t>(), ws_rows, scratch.status(),
                                       logits.stream()));
  check::status(a.op, scratch.fetch(logits.stream()).status,
                kSpeculateGetTokenPenaltyMultiScoresStatus);
#else
  check::unsupported_place(a.op, "logits", logits);
#endif
}
