// fd_mtp_draft_model_update (spec §6.3). Arguments, checks and registration:
// fd_mtp/schema/draft.py (generated into draft_model_update.gen.h).
#include "draft_model_update.gen.h"

void draft_model_update_apply(DraftModelUpdateArgs& a, fd_mtp::DraftModelUpdateParams& p) {
  using namespace fd_mtp;
  // base_model_draft_tokens: column substep + 1 is written.
  if (a.dims.Db < static_cast<int64_t>(a.substep) + 2)
    check::fail(a.op, "base_model_draft_tokens", "needs at least ", a.substep + 2,
                " columns, got shape ", check::shape_str(a.base_model_draft_tokens.shape()));
  const auto& ref = a.seq_lens_this_time;
  bool* out_flag = a.not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    check::status(a.op, draft_model_update_cpu(p, out_flag), kDraftModelUpdateStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op, draft_model_update_cuda(p, scratch.status(), scratch.count(), ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(a.op, result.status, kDraftModelUpdateStatus);
  *out_flag = result.count < a.dims.B;
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
