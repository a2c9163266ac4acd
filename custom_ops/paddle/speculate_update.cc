// fd_mtp_speculate_update (spec §5.10)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_update.h"

namespace {
constexpr const char* kOp = "speculate_update";
using paddle::DataType;
}  // namespace

// seq_lens_encoder:        [>=real_bsz] int32, written
// seq_lens_decoder:        [>=real_bsz] int32, written
// not_need_stop:           [1] bool on the CPU, written
// draft_tokens:            [>=real_bsz, D] int64, written (column 0)
// actual_draft_token_nums: [>=real_bsz] int32, written
// accept_tokens:           [>=real_bsz, Wa] int64, read
// accept_num:              [>=real_bsz] int32, read
// stop_flags:              [max_bsz >= real_bsz] bool, read (defines max_bsz)
// seq_lens_this_time:      [real_bsz] int32, read (defines real_bsz)
// is_block_step:           [>=real_bsz] bool, read
// stop_nums:               [1] int64 on any device, read on the host
// mask_rollback:           [>=real_bsz] int32, written
void SpeculateUpdate(paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                     paddle::Tensor& not_need_stop, paddle::Tensor& draft_tokens,
                     paddle::Tensor& actual_draft_token_nums, const paddle::Tensor& accept_tokens,
                     const paddle::Tensor& accept_num, const paddle::Tensor& stop_flags,
                     const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& is_block_step,
                     const paddle::Tensor& stop_nums, paddle::Tensor& mask_rollback) {
  using namespace fd_mtp;
  const int64_t real_bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, real_bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, real_bsz);
  check::scalar(kOp, "not_need_stop", not_need_stop, DataType::BOOL);
  check::on_cpu(kOp, "not_need_stop", not_need_stop);
  const int64_t draft_cols =
      check::matrix(kOp, "draft_tokens", draft_tokens, DataType::INT64, real_bsz);
  check::per_request(kOp, "actual_draft_token_nums", actual_draft_token_nums, DataType::INT32,
                     real_bsz);
  const int64_t acc_cols =
      check::matrix(kOp, "accept_tokens", accept_tokens, DataType::INT64, real_bsz);
  check::per_request(kOp, "accept_num", accept_num, DataType::INT32, real_bsz);
  const int64_t max_bsz =
      check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, real_bsz);
  check::per_request(kOp, "is_block_step", is_block_step, DataType::BOOL, real_bsz);
  check::scalar(kOp, "stop_nums", stop_nums, DataType::INT64);
  check::per_request(kOp, "mask_rollback", mask_rollback, DataType::INT32, real_bsz);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"draft_tokens", &draft_tokens},
                     {"actual_draft_token_nums", &actual_draft_token_nums},
                     {"accept_tokens", &accept_tokens},
                     {"accept_num", &accept_num},
                     {"stop_flags", &stop_flags},
                     {"is_block_step", &is_block_step},
                     {"mask_rollback", &mask_rollback}});
  const int64_t stop_num = check::host_int64(kOp, "stop_nums", stop_nums);

  SpeculateUpdateParams p{};
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.draft_tokens = draft_tokens.data<int64_t>();
  p.draft_tokens_cols = draft_cols;
  p.actual_draft_token_nums = actual_draft_token_nums.data<int32_t>();
  p.accept_tokens = accept_tokens.data<int64_t>();
  p.accept_tokens_cols = acc_cols;
  p.accept_num = accept_num.data<int32_t>();
  p.stop_flags = stop_flags.data<bool>();
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.is_block_step = is_block_step.data<bool>();
  p.mask_rollback = mask_rollback.data<int32_t>();
  p.real_bsz = real_bsz;
  p.max_bsz = max_bsz;

  static constexpr StatusInfo kStatus[] = {
      {kSpecUpdateAcceptNum, "accept_num",
       "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"},
  };
  bool* out_flag = not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    int64_t stopped = 0;
    check::status(kOp, speculate_update_cpu(p, &stopped), kStatus);
    *out_flag = stopped < stop_num;
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, speculate_update_cuda(p, scratch.status(), scratch.count(), ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(kOp, result.status, kStatus);
  *out_flag = result.count < stop_num;
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_update)
    .Inputs({"seq_lens_encoder", "seq_lens_decoder", "not_need_stop", "draft_tokens",
             "actual_draft_token_nums", "accept_tokens", "accept_num", "stop_flags",
             "seq_lens_this_time", "is_block_step", "stop_nums", "mask_rollback"})
    .Outputs({"seq_lens_encoder_out", "seq_lens_decoder_out", "not_need_stop_out",
              "draft_tokens_out", "actual_draft_token_nums_out", "mask_rollback_out"})
    .SetInplaceMap({{"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"not_need_stop", "not_need_stop_out"},
                    {"draft_tokens", "draft_tokens_out"},
                    {"actual_draft_token_nums", "actual_draft_token_nums_out"},
                    {"mask_rollback", "mask_rollback_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateUpdate));
