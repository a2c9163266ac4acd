// fd_mtp_draft_model_postprocess (spec §6.5)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/draft_model_postprocess.h"

namespace {
constexpr const char* kOp = "draft_model_postprocess";
using paddle::DataType;
}  // namespace

// base_model_draft_tokens:       [>=bsz, Db] int64, read
// base_model_seq_lens_this_time: [bsz] or [bsz,1] int32, written (defines bsz)
// base_model_seq_lens_encoder:   [>=bsz] int32, read
// base_model_stop_flags:         [>=bsz] bool, read
void DraftModelPostprocess(const paddle::Tensor& base_model_draft_tokens,
                           paddle::Tensor& base_model_seq_lens_this_time,
                           const paddle::Tensor& base_model_seq_lens_encoder,
                           const paddle::Tensor& base_model_stop_flags) {
  using namespace fd_mtp;
  const int64_t bsz = check::per_request(
      kOp, "base_model_seq_lens_this_time", base_model_seq_lens_this_time,
      DataType::INT32, 0);
  const int64_t cols = check::matrix(kOp, "base_model_draft_tokens",
                                     base_model_draft_tokens, DataType::INT64, bsz);
  check::per_request(kOp, "base_model_seq_lens_encoder",
                     base_model_seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "base_model_stop_flags", base_model_stop_flags,
                     DataType::BOOL, bsz);
  const auto& ref = base_model_seq_lens_this_time;
  check::same_place(kOp, "base_model_seq_lens_this_time", ref,
                    {{"base_model_draft_tokens", &base_model_draft_tokens},
                     {"base_model_seq_lens_encoder", &base_model_seq_lens_encoder},
                     {"base_model_stop_flags", &base_model_stop_flags}});

  DraftModelPostprocessParams p{base_model_draft_tokens.data<int64_t>(),
                                cols,
                                base_model_seq_lens_this_time.data<int32_t>(),
                                base_model_seq_lens_encoder.data<int32_t>(),
                                base_model_stop_flags.data<bool>(),
                                bsz};
  if (ref.is_cpu()) {
    draft_model_postprocess_cpu(p);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  check::cuda(kOp, draft_model_postprocess_cuda(p, ref.stream()));
#else
  check::unsupported_place(kOp, "base_model_seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_draft_model_postprocess)
    .Inputs({"base_model_draft_tokens", "base_model_seq_lens_this_time",
             "base_model_seq_lens_encoder", "base_model_stop_flags"})
    .Outputs({"base_model_seq_lens_this_time_out"})
    .SetInplaceMap({{"base_model_seq_lens_this_time",
                     "base_model_seq_lens_this_time_out"}})
    .SetKernelFn(PD_KERNEL(DraftModelPostprocess));
