// fd_mtp_recover_decode_task (spec §5.15, v1 scheduler). Arguments, checks and registration:
// fd_mtp/schema/blocks.py (generated into recover_decode_task.gen.h).
#include "recover_decode_task.gen.h"

void recover_decode_task_apply(RecoverDecodeTaskArgs& a, fd_mtp::RecoverDecodeParams& p) {
  using namespace fd_mtp;
  const bool spec = a.draft_tokens.is_initialized();
  if (a.step_draft_tokens.is_initialized() != spec ||
      a.step_seq_lens_this_time.is_initialized() != spec)
    check::fail(a.op, "draft_tokens",
                "and step_draft_tokens and step_seq_lens_this_time must all be given (speculative "
                "variant) or all be None");
  const auto& ref = a.seq_lens_this_time;
  if (ref.is_cpu()) {
    check::status(a.op, recover_decode_cpu(p), kRecoverDecodeTaskStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op, recover_decode_task_cuda(p, scratch.status(), ref.stream()));
  check::status(a.op, scratch.fetch(ref.stream()).status, kRecoverDecodeTaskStatus);
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
