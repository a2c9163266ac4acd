// fd_mtp_speculate_set_value_by_flags_and_idx (spec §5.12)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_set_value_by_flags_and_idx.h"

namespace {
constexpr const char* kOp = "speculate_set_value_by_flags_and_idx";
using paddle::DataType;
}  // namespace

// pre_ids_all:        [>=bs, Lp] int64, written (columns step_idx - accept_num + 1 .. step_idx)
// accept_tokens:      [>=bs, Wa] int64, read
// accept_num:         [>=bs] int32, written (0 for stopped requests)
// stop_flags:         [>=bs] bool, read
// seq_lens_this_time: [bs] int32, read for its length only (defines bs)
// seq_lens_encoder:   [>=bs] int32, read
// seq_lens_decoder:   [>=bs] int32, written (0 for stopped requests)
// step_idx:           [>=bs] int64, read
void SpeculateSetValueByFlagsAndIdx(paddle::Tensor& pre_ids_all, const paddle::Tensor& accept_tokens,
                                    paddle::Tensor& accept_num, const paddle::Tensor& stop_flags,
                                    const paddle::Tensor& seq_lens_this_time,
                                    const paddle::Tensor& seq_lens_encoder,
                                    paddle::Tensor& seq_lens_decoder,
                                    const paddle::Tensor& step_idx) {
  using namespace fd_mtp;
  const int64_t bs =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  const int64_t pre_cols = check::matrix(kOp, "pre_ids_all", pre_ids_all, DataType::INT64, bs);
  const int64_t acc_cols = check::matrix(kOp, "accept_tokens", accept_tokens, DataType::INT64, bs);
  check::per_request(kOp, "accept_num", accept_num, DataType::INT32, bs);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bs);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bs);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bs);
  check::per_request(kOp, "step_idx", step_idx, DataType::INT64, bs);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"pre_ids_all", &pre_ids_all},
                     {"accept_tokens", &accept_tokens},
                     {"accept_num", &accept_num},
                     {"stop_flags", &stop_flags},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"step_idx", &step_idx}});

  SetValueByFlagsParams p{};
  p.pre_ids_all = pre_ids_all.data<int64_t>();
  p.pre_ids_cols = pre_cols;
  p.accept_tokens = accept_tokens.data<int64_t>();
  p.accept_tokens_cols = acc_cols;
  p.accept_num = accept_num.data<int32_t>();
  p.stop_flags = stop_flags.data<bool>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.step_idx = step_idx.data<int64_t>();
  p.bs = bs;

  static constexpr StatusInfo kStatus[] = {
      {kSetValueAcceptNum, "accept_num",
       "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"},
      {kSetValuePreIdsColumn, "pre_ids_all",
       "accepted tokens go to column {value} (from step_idx and accept_num) but the row has "
       "{limit} columns"},
  };
  if (ref.is_cpu()) {
    check::status(kOp, set_value_cpu(p), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, speculate_set_value_by_flags_and_idx_cuda(p, scratch.status(), ref.stream()));
  check::status(kOp, scratch.fetch(ref.stream()).status, kStatus);
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_set_value_by_flags_and_idx)
    .Inputs({"pre_ids_all", "accept_tokens", "accept_num", "stop_flags", "seq_lens_this_time",
             "seq_lens_encoder", "seq_lens_decoder", "step_idx"})
    .Outputs({"pre_ids_all_out", "accept_num_out", "seq_lens_decoder_out"})
    .SetInplaceMap({{"pre_ids_all", "pre_ids_all_out"},
                    {"accept_num", "accept_num_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateSetValueByFlagsAndIdx));
