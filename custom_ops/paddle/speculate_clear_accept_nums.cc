// fd_mtp_speculate_clear_accept_nums (spec §5.16)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_clear_accept_nums.h"

namespace {
constexpr const char* kOp = "speculate_clear_accept_nums";
using paddle::DataType;
}  // namespace

// accept_num:       [>=bsz] int32, written
// seq_lens_decoder: [bsz] or [bsz, 1] int32, read (defines bsz)
void SpeculateClearAcceptNums(paddle::Tensor& accept_num, const paddle::Tensor& seq_lens_decoder) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request_from(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, 0,
                              "seq_lens_decoder");
  check::per_request_from(kOp, "accept_num", accept_num, DataType::INT32, bsz, "seq_lens_decoder");
  const auto& ref = seq_lens_decoder;
  check::same_place(kOp, "accept_num", accept_num, ref, "seq_lens_decoder");

  ClearAcceptNumsParams p{accept_num.data<int32_t>(), seq_lens_decoder.data<int32_t>(), bsz};
  if (ref.is_cpu()) {
    clear_accept_nums_cpu(p);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  check::cuda(kOp, speculate_clear_accept_nums_cuda(p, ref.stream()));
#else
  check::unsupported_place(kOp, "seq_lens_decoder", ref);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_clear_accept_nums)
    .Inputs({"accept_num", "seq_lens_decoder"})
    .Outputs({"accept_num_out"})
    .SetInplaceMap({{"accept_num", "accept_num_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateClearAcceptNums));
