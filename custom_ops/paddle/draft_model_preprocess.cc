// fd_mtp_draft_model_preprocess (spec §6.1)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/draft_model_preprocess.h"

namespace {
constexpr const char* kOp = "draft_model_preprocess";
using paddle::DataType;
}  // namespace

// draft_tokens:                  [>=bsz, Dd] int64, written
// input_ids:                     [>=bsz, Li] int64, written
// stop_flags:                    [>=bsz] bool, written
// seq_lens_this_time:            [bsz] int32, written (defines bsz)
// seq_lens_encoder:              [>=bsz] int32, written
// seq_lens_decoder:              [>=bsz] int32, written
// step_idx:                      [>=bsz] int64, written
// not_need_stop:                 [1] bool on the CPU, written
// is_block_step:                 [>=bsz] bool, written
// batch_drop:                    [>=bsz] bool, written
// pre_ids:                       [>=bsz, Lp] int64, written
// mask_rollback:                 [>=bsz] int32, written
// recompute_token_num:           [>=bsz] int32, written
// accept_tokens:                 [>=bsz, Wa] int64, read
// accept_num:                    [>=bsz] int32, read
// base_model_seq_lens_this_time: [>=bsz] int32, read (may be seq_lens_this_time itself)
// base_model_seq_lens_encoder:   [>=bsz] int32, unused (kept for the signature)
// base_model_seq_lens_decoder:   [>=bsz] int32, read
// base_model_step_idx:           [>=bsz] int64, read
// base_model_stop_flags:         [>=bsz] bool, read
// base_model_is_block_step:      [>=bsz] bool, read
// base_model_draft_tokens:       [>=bsz, Db] int64, written (columns 1..Db-1 reset to -1)
void DraftModelPreprocess(
    paddle::Tensor& draft_tokens, paddle::Tensor& input_ids, paddle::Tensor& stop_flags,
    paddle::Tensor& seq_lens_this_time, paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder, paddle::Tensor& step_idx,
    paddle::Tensor& not_need_stop, paddle::Tensor& is_block_step,
    paddle::Tensor& batch_drop, paddle::Tensor& pre_ids, paddle::Tensor& mask_rollback,
    paddle::Tensor& recompute_token_num, const paddle::Tensor& accept_tokens,
    const paddle::Tensor& accept_num, const paddle::Tensor& base_model_seq_lens_this_time,
    const paddle::Tensor& base_model_seq_lens_encoder,
    const paddle::Tensor& base_model_seq_lens_decoder,
    const paddle::Tensor& base_model_step_idx, const paddle::Tensor& base_model_stop_flags,
    const paddle::Tensor& base_model_is_block_step,
    paddle::Tensor& base_model_draft_tokens, int num_model_step,
    bool truncate_first_token, bool splitwise_prefill, bool kvcache_scheduler_v1) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  const int64_t draft_cols =
      check::matrix(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  const int64_t input_cols = check::matrix(kOp, "input_ids", input_ids, DataType::INT64, bsz);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  check::per_request(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  check::scalar(kOp, "not_need_stop", not_need_stop, DataType::BOOL);
  check::on_cpu(kOp, "not_need_stop", not_need_stop);
  check::per_request(kOp, "is_block_step", is_block_step, DataType::BOOL, bsz);
  check::per_request(kOp, "batch_drop", batch_drop, DataType::BOOL, bsz);
  const int64_t pre_cols = check::matrix(kOp, "pre_ids", pre_ids, DataType::INT64, bsz);
  check::per_request(kOp, "mask_rollback", mask_rollback, DataType::INT32, bsz);
  check::per_request(kOp, "recompute_token_num", recompute_token_num, DataType::INT32, bsz);
  const int64_t accept_cols =
      check::matrix(kOp, "accept_tokens", accept_tokens, DataType::INT64, bsz);
  check::per_request(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  check::per_request(kOp, "base_model_seq_lens_this_time", base_model_seq_lens_this_time,
                     DataType::INT32, bsz);
  check::per_request(kOp, "base_model_seq_lens_encoder", base_model_seq_lens_encoder,
                     DataType::INT32, bsz);
  check::per_request(kOp, "base_model_seq_lens_decoder", base_model_seq_lens_decoder,
                     DataType::INT32, bsz);
  check::per_request(kOp, "base_model_step_idx", base_model_step_idx, DataType::INT64, bsz);
  check::per_request(kOp, "base_model_stop_flags", base_model_stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "base_model_is_block_step", base_model_is_block_step,
                     DataType::BOOL, bsz);
  const int64_t base_cols = check::matrix(kOp, "base_model_draft_tokens",
                                          base_model_draft_tokens, DataType::INT64, bsz);
  if (num_model_step < 1) check::fail(kOp, "num_model_step", "must be >= 1, got ", num_model_step);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"draft_tokens", &draft_tokens},
                     {"input_ids", &input_ids},
                     {"stop_flags", &stop_flags},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"step_idx", &step_idx},
                     {"is_block_step", &is_block_step},
                     {"batch_drop", &batch_drop},
                     {"pre_ids", &pre_ids},
                     {"mask_rollback", &mask_rollback},
                     {"recompute_token_num", &recompute_token_num},
                     {"accept_tokens", &accept_tokens},
                     {"accept_num", &accept_num},
                     {"base_model_seq_lens_this_time", &base_model_seq_lens_this_time},
                     {"base_model_seq_lens_decoder", &base_model_seq_lens_decoder},
                     {"base_model_step_idx", &base_model_step_idx},
                     {"base_model_stop_flags", &base_model_stop_flags},
                     {"base_model_is_block_step", &base_model_is_block_step},
                     {"base_model_draft_tokens", &base_model_draft_tokens}});

  DraftModelPreprocessParams p{};
  p.draft_tokens = draft_tokens.data<int64_t>();
  p.draft_tokens_cols = draft_cols;
  p.input_ids = input_ids.data<int64_t>();
  p.input_ids_cols = input_cols;
  p.stop_flags = stop_flags.data<bool>();
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.step_idx = step_idx.data<int64_t>();
  p.is_block_step = is_block_step.data<bool>();
  p.batch_drop = batch_drop.data<bool>();
  p.pre_ids = pre_ids.data<int64_t>();
  p.pre_ids_cols = pre_cols;
  p.mask_rollback = mask_rollback.data<int32_t>();
  p.recompute_token_num = recompute_token_num.data<int32_t>();
  p.accept_tokens = accept_tokens.data<int64_t>();
  p.accept_tokens_cols = accept_cols;
  p.accept_num = accept_num.data<int32_t>();
  p.base_model_seq_lens_this_time = base_model_seq_lens_this_time.data<int32_t>();
  p.base_model_seq_lens_decoder = base_model_seq_lens_decoder.data<int32_t>();
  p.base_model_step_idx = base_model_step_idx.data<int64_t>();
  p.base_model_stop_flags = base_model_stop_flags.data<bool>();
  p.base_model_is_block_step = base_model_is_block_step.data<bool>();
  p.base_model_draft_tokens = base_model_draft_tokens.data<int64_t>();
  p.base_model_draft_tokens_cols = base_cols;
  p.bsz = bsz;
  p.num_model_step = num_model_step;
  p.truncate_first_token = truncate_first_token;
  p.splitwise_prefill = splitwise_prefill;
  p.kvcache_scheduler_v1 = kvcache_scheduler_v1;

  static constexpr StatusInfo kStatus[] = {
      {kPreprocessInputIdsColumn, "input_ids",
       "the first accepted token goes to column {value} but the row has {limit} columns"},
      {kPreprocessPreIdsColumn, "pre_ids",
       "accepted tokens go to column {value} but the row has {limit} columns"},
      {kPreprocessAcceptNum, "accept_num",
       "is {value}; it must be in [0, {limit}] (columns of draft_tokens and accept_tokens)"},
  };
  bool* out_flag = not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    check::status(kOp, draft_model_preprocess_cpu(p, out_flag), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, draft_model_preprocess_cuda(p, scratch.status(), scratch.count(),
                                               ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(kOp, result.status, kStatus);
  *out_flag = result.count > 0;
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_draft_model_preprocess)
    .Inputs({"draft_tokens", "input_ids", "stop_flags", "seq_lens_this_time",
             "seq_lens_encoder", "seq_lens_decoder", "step_idx", "not_need_stop",
             "is_block_step", "batch_drop", "pre_ids", "mask_rollback",
             "recompute_token_num", "accept_tokens", "accept_num",
             "base_model_seq_lens_this_time", "base_model_seq_lens_encoder",
             "base_model_seq_lens_decoder", "base_model_step_idx",
             "base_model_stop_flags", "base_model_is_block_step",
             "base_model_draft_tokens"})
    .Outputs({"draft_tokens_out", "input_ids_out", "stop_flags_out",
              "seq_lens_this_time_out", "seq_lens_encoder_out", "seq_lens_decoder_out",
              "step_idx_out", "not_need_stop_out", "is_block_step_out", "batch_drop_out",
              "pre_ids_out", "mask_rollback_out", "recompute_token_num_out",
              "base_model_draft_tokens_out"})
    .Attrs({"num_model_step: int", "truncate_first_token: bool", "splitwise_prefill: bool",
            "kvcache_scheduler_v1: bool"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"input_ids", "input_ids_out"},
                    {"stop_flags", "stop_flags_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"step_idx", "step_idx_out"},
                    {"not_need_stop", "not_need_stop_out"},
                    {"is_block_step", "is_block_step_out"},
                    {"batch_drop", "batch_drop_out"},
                    {"pre_ids", "pre_ids_out"},
                    {"mask_rollback", "mask_rollback_out"},
                    {"recompute_token_num", "recompute_token_num_out"},
                    {"base_model_draft_tokens", "base_model_draft_tokens_out"}})
    .SetKernelFn(PD_KERNEL(DraftModelPreprocess));
