// fd_mtp_speculate_set_stop_value_multi_seqs (spec §5.8). Arguments, checks and registration:
// fd_mtp/schema/update.py (generated into speculate_set_stop_value_multi_seqs.gen.h).
#include "speculate_set_stop_value_multi_seqs.gen.h"

void speculate_set_stop_value_multi_seqs_apply(SpeculateSetStopValueMultiSeqsArgs& a,
                                               fd_mtp::SetStopValueParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.accept_tokens;
  if (ref.is_cpu()) {
    check::status(a.op, set_stop_value_cpu(p), kSpeculateSetStopValueMultiSeqsStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(a.op, speculate_set_stop_value_multi_seqs_cuda(p, scratch.status(), ref.stream()));
  check::status(a.op, scratch.fetch(ref.stream()).status, kSpeculateSetStopValueMultiSeqsStatus);
#else
  check::unsupported_place(a.op, "accept_tokens", ref);
#endif
}
