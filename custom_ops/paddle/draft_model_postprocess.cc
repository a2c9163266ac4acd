// fd_mtp_draft_model_postprocess (spec §6.5). Arguments, checks and registration:
// fd_mtp/schema/draft.py (generated into draft_model_postprocess.gen.h).
#include "draft_model_postprocess.gen.h"

void draft_model_postprocess_apply(DraftModelPostprocessArgs& a,
                                   fd_mtp::DraftModelPostprocessParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.base_model_seq_lens_this_time;
  if (ref.is_cpu()) {
    draft_model_postprocess_cpu(p);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  check::cuda(a.op, draft_model_postprocess_cuda(p, ref.stream()));
#else
  check::unsupported_place(a.op, "base_model_seq_lens_this_time", ref);
#endif
}
