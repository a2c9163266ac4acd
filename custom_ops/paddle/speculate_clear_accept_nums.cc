// fd_mtp_speculate_clear_accept_nums (spec §5.16). Arguments, checks and registration:
// fd_mtp/schema/update.py (generated into speculate_clear_accept_nums.gen.h).
#include "speculate_clear_accept_nums.gen.h"

void speculate_clear_accept_nums_apply(SpeculateClearAcceptNumsArgs& a,
                                       fd_mtp::ClearAcceptNumsParams& p) {
  using namespace fd_mtp;
  const auto& ref = a.seq_lens_decoder;
  if (ref.is_cpu()) {
    clear_accept_nums_cpu(p);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  check::cuda(a.op, speculate_clear_accept_nums_cuda(p, ref.stream()));
#else
  check::unsupported_place(a.op, "seq_lens_decoder", ref);
#endif
}
