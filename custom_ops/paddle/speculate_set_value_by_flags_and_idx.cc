// fd_mtp_speculate_set_value_by_flags_and_idx (spec §5.12). Arguments, checks and registration:
// fd_mtp/schema/update.py (generated into speculate_set_value_by_flags_and_idx.gen.h).
#include "speculate_set_value_by_flags_and_idx.gen.h"

void speculate_set_value_by_flags_and_idx_apply(SpeculateSetValueByFlagsAndIdxArgs& a,
                                                fd_mtp::SetValueByFlagsParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_this_time;
  if (ref.is_cpu()) {
    check::status(a.op, set_value_cpu(p), kSpeculateSetValueByFlagsAndIdxStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op, speculate_set_value_by_flags_and_idx_cuda(p, scratch.status(), ref.stream()));
  check::status(a.op, scratch.fetch(ref.stream()).status, kSpeculateSetValueByFlagsAndIdxStatus);
#else
  check::unsupported_place(a.op, "seq_lens_this_time", ref);
#endif
}
