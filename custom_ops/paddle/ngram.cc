// fd_mtp_ngram_match (spec §5.17) and fd_mtp_hybrid_mtp_ngram (spec §6.7). Arguments, checks and
// registration: fd_mtp/schema/ngram.py (generated into ngram_match.gen.h, hybrid_mtp_ngram.gen.h).
#include "hybrid_mtp_ngram.gen.h"
#include "ngram_match.gen.h"

namespace {
// Both ops: run the kernel on the tensors' device (seq_lens_this_time's).
void run_ngram(const char* op, const paddle::Tensor& ref, fd_mtp::NgramParams& p, int32_t stream_op,
               const fd_mtp::StatusInfo (&status)[4]) {
  using namespace fd_mtp;
  if (ref.is_cpu()) {
    check::status(op, ngram_cpu(p), status);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  auto* hits = static_cast<int64_t*>(
      gpu::workspace(op, ref, "ngram_hits", (p.bsz > 0 ? p.bsz : 1) * sizeof(int64_t), false));
  gpu::Op g(op, stream_op, ref);
  check::cuda(op, ngram_cuda(p, hits, g.status(), g.stream()));
  g.commit();
#else
  (void)stream_op;
  check::unsupported_place(op, "seq_lens_this_time", ref);
#endif
}
}  // namespace

void ngram_match_apply(NgramMatchArgs& a, fd_mtp::NgramParams& p) {
  p.min_ngram_size = 1;
  p.hybrid = false;  // max_draft_tokens is ignored, as upstream
  run_ngram(a.op, a.seq_lens_this_time, p, kNgramMatchStreamOp, kNgramMatchStatus);
}

void hybrid_mtp_ngram_apply(HybridMtpNgramArgs& a, fd_mtp::NgramParams& p) {
  using namespace fd_mtp;
  if (a.min_ngram_size > a.max_ngram_size)
    check::fail(a.op, "min_ngram_size", "must be <= max_ngram_size (", a.max_ngram_size, "), got ",
                a.min_ngram_size);
  p.hybrid = true;  // draft_token_num and seq_lens_encoder are not read
  run_ngram(a.op, a.seq_lens_this_time, p, kHybridMtpNgramStreamOp, kHybridMtpNgramStatus);
}
