// fd_mtp_recover_decode_task (spec §5.15). Arguments, checks, registration and the dispatch:
// fd_mtp/schema/blocks.py (generated into recover_decode_task.gen.h / .gen.cc). Here: the check
// no schema expresses.
#include "recover_decode_task.gen.h"

// The speculative variant passes draft_tokens, step_draft_tokens and step_seq_lens_this_time
// together; the plain variant none of them.
void recover_decode_task_check(RecoverDecodeTaskArgs& a, fd_mtp::RecoverDecodeParams& p) {
  using namespace fd_mtp;
  const bool spec = a.draft_tokens.is_initialized();
  if (a.step_draft_tokens.is_initialized() != spec ||
      a.step_seq_lens_this_time.is_initialized() != spec)
    check::fail(a.op, "draft_tokens",
                "and step_draft_tokens and step_seq_lens_this_time must all be given (speculative "
                "variant) or all be None");
}
