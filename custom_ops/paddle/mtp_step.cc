// fd_mtp_mtp_step_paddle (spec §6.6, v0 scheduler). Arguments, checks and registration:
// fd_mtp/schema/draft.py (generated into mtp_step_paddle.gen.h).
#include <vector>

#include "mtp_step_paddle.gen.h"

void mtp_step_paddle_apply(MtpStepPaddleArgs& a, fd_mtp::MtpStepParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_this_time;
  const int64_t bsz = a.dims.B;
  // FastDeploy's free lists are 1-D ([F], paddle.to_tensor of a list): any other rank is refused.
  if (a.free_list.shape().size() != 1)
    check::fail(a.op, "free_list", "must have shape [F] (1-D), got ",
                check::shape_str(a.free_list.shape()));
  // need_list: the kernel's workspace [bsz], not an argument.
  if (ref.is_cpu()) {
    std::vector<int32_t> need_list(static_cast<size_t>(bsz));
    p.need_list = need_list.data();
    check::status(a.op, mtp_step_cpu(p), kMtpStepPaddleStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  p.need_list = static_cast<int32_t*>(gpu::workspace(a.op, ref, "mtp_step_need_list",
                                                     (bsz > 0 ? bsz : 1) * sizeof(int32_t), false));
  gpu::Op g(a.op, kMtpStepPaddleStreamOp, ref);
  check::cuda(a.op, mtp_step_cuda(p, g.status(), g.stream()));
  g.commit();
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
