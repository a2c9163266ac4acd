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
  // The counts workspace: persistent per stream, zeroed when it grows; the kernel leaves it zero.
  const int64_t ws_rows = token_penalty_workspace_rows(p.rows);
  auto* counts = static_cast<int32_t*>(
      gpu::workspace(a.op, logits, "penalty_counts",
                     ws_rows * p.vocab * static_cast<int64_t>(sizeof(int32_t)), true));
  gpu::Op g(a.op, kSpeculateGetTokenPenaltyMultiScoresStreamOp, logits);
  check::cuda(a.op, token_penalty_cuda(p, counts, ws_rows, g.status(), g.stream()));
  g.commit();
#else
  check::unsupported_place(a.op, "logits", logits);
#endif
}
