// fd_mtp_speculate_verify (spec §5.7). Arguments, checks, registration and the dispatch:
// fd_mtp/schema/verify.py (generated into speculate_verify.gen.h / .gen.cc). Here: the checks
// no schema expresses.
#include "speculate_verify.gen.h"

void speculate_verify_check(SpeculateVerifyArgs& a, fd_mtp::SpeculateVerifyParams& p) {
  using namespace fd_mtp;
  // draft_probs' rows are the distributions of target_probs' vocabulary. The Python wrappers
  // pass both only for "rejection", and refuse target_probs=None there; Paddle hands a zero-size
  // optional input over as absent: then no row exists, and the kernel's row check names
  // target_probs if a request needs one. A draft_probs with no rows would read as a greedy
  // drafter here: fd_mtp.ops refuses it (naming draft_probs) whenever target_probs has rows.
  if (a.target_probs && a.draft_probs && a.dims.Vq != a.dims.V)
    check::fail(a.op, "draft_probs", "must have ", a.dims.V, " columns, got shape ",
                check::shape_str(a.draft_probs->shape()));
  if (!a.target_probs) {  // draft_probs alone is never read
    p.draft_probs = nullptr;
    p.draft_prob_rows = 0;
  }
#ifdef PADDLE_WITH_CUDA
  // rejection on the GPU: the check pass samples each request's row once and leaves the token in
  // a persistent per-stream [bsz] workspace for the apply pass (without it the row is read twice)
  if (a.target_probs && a.target_probs->is_gpu())
    p.sample_tokens =
        static_cast<int64_t*>(gpu::workspace(a.op, *a.target_probs, "verify_sample_tokens",
                                             (p.bsz > 0 ? p.bsz : 1) * sizeof(int64_t), false));
#endif
}
