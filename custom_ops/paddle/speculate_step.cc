// fd_mtp_speculate_step_paddle (spec §5.13, v0 scheduler). Arguments, checks and registration:
// fd_mtp/schema/blocks.py (generated into speculate_step_paddle.gen.h).
#include "speculate_step_paddle.gen.h"

void speculate_step_paddle_apply(SpeculateStepPaddleArgs& a, fd_mtp::SpeculateStepParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_this_time;
  if (ref.is_cpu()) {
    check::status(a.op, speculate_step_cpu(p), kSpeculateStepPaddleStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op, speculate_step_cuda(p, scratch.status(), ref.stream()));
  check::status(a.op, scratch.fetch(ref.stream()).status, kSpeculateStepPaddleStatus);
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
