// fd_mtp_speculate_update (spec §5.10). Arguments, checks and registration:
// fd_mtp/schema/update.py (generated into speculate_update.gen.h).
#include "speculate_update.gen.h"

void speculate_update_apply(SpeculateUpdateArgs& a, fd_mtp::SpeculateUpdateParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_this_time;
  // stop_nums is read on the host (a 1-element copy when it lives on the GPU).
  const int64_t stop_num = check::host_int64(a.op, "stop_nums", a.stop_nums);
  bool* out_flag = a.not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    int64_t stopped = 0;
    check::status(a.op, speculate_update_cpu(p, &stopped), kSpeculateUpdateStatus);
    *out_flag = stopped < stop_num;
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op, speculate_update_cuda(p, scratch.status(), scratch.count(), ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(a.op, result.status, kSpeculateUpdateStatus);
  *out_flag = result.count < stop_num;
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
