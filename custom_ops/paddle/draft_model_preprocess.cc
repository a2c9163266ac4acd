// fd_mtp_draft_model_preprocess (spec §6.1). Arguments, checks and registration:
// fd_mtp/schema/draft.py (generated into draft_model_preprocess.gen.h).
#include "draft_model_preprocess.gen.h"

void draft_model_preprocess_apply(DraftModelPreprocessArgs& a,
                                  fd_mtp::DraftModelPreprocessParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_this_time;
  bool* out_flag = a.not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    check::status(a.op, draft_model_preprocess_cpu(p, out_flag), kDraftModelPreprocessStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op,
              draft_model_preprocess_cuda(p, scratch.status(), scratch.count(), ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(a.op, result.status, kDraftModelPreprocessStatus);
  *out_flag = result.count > 0;
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
