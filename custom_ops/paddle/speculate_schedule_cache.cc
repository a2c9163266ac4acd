// fd_mtp_speculate_schedule_cache (spec §5.14, v1 scheduler). Arguments, checks and registration:
// fd_mtp/schema/blocks.py (generated into speculate_schedule_cache.gen.h).
#include "speculate_schedule_cache.gen.h"

void speculate_schedule_cache_apply(SpeculateScheduleCacheArgs& a, fd_mtp::ScheduleCacheParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_this_time;
  // stop_nums is read on the host (a 1-element copy when it lives on the GPU).
  const int64_t limit = check::host_int64(a.op, "stop_nums", a.stop_nums);
  bool* out_flag = a.not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    check::status(a.op, schedule_cache_cpu(p, limit, out_flag), kSpeculateScheduleCacheStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op,
              speculate_schedule_cache_cuda(p, scratch.status(), scratch.count(), ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(a.op, result.status, kSpeculateScheduleCacheStatus);
  *out_flag = result.count + (p.max_bsz - p.bsz) < limit;
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
