// fd_mtp_speculate_schedule_cache (spec §5.14, v1 scheduler)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_schedule_cache.h"

namespace {
constexpr const char* kOp = "speculate_schedule_cache";
using paddle::DataType;
}  // namespace

// draft_tokens:            [>=max_bsz, Dd] int64, read
// block_tables:            [>=bsz, NB] int32, read
// stop_flags:              [max_bsz] bool, written (defines max_bsz)
// prompt_lens:             [>=bsz] int64, read
// seq_lens_this_time:      [bsz] int32, written (defines bsz = real_bsz)
// seq_lens_encoder:        [>=bsz] int32, written
// seq_lens_decoder:        [>=bsz] int32, written
// step_seq_lens_decoder:   [>=bsz] int32, written
// step_draft_tokens:       [>=bsz, >=Dd] int64, written (the first Dd columns)
// step_seq_lens_this_time: [>=bsz] int32, written
// accept_num:              [>=bsz] int32, written
// accept_tokens:           [>=bsz, Wa] int64, written
// is_block_step:           [>=bsz] bool, written
// not_need_stop:           [1] bool on the CPU, written
// stop_nums:               [1] int64, read (on the host)
void SpeculateScheduleCache(
    const paddle::Tensor& draft_tokens, const paddle::Tensor& block_tables,
    paddle::Tensor& stop_flags, const paddle::Tensor& prompt_lens,
    paddle::Tensor& seq_lens_this_time, paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder, paddle::Tensor& step_seq_lens_decoder,
    paddle::Tensor& step_draft_tokens, paddle::Tensor& step_seq_lens_this_time,
    paddle::Tensor& accept_num, paddle::Tensor& accept_tokens, paddle::Tensor& is_block_step,
    paddle::Tensor& not_need_stop, const paddle::Tensor& stop_nums, int block_size,
    int max_draft_tokens, bool prefill_one_step_stop) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  const int64_t max_bsz = check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  const int64_t draft_cols =
      check::matrix(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  const int64_t nb = check::matrix(kOp, "block_tables", block_tables, DataType::INT32, bsz);
  check::per_request(kOp, "prompt_lens", prompt_lens, DataType::INT64, bsz);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  check::per_request(kOp, "step_seq_lens_decoder", step_seq_lens_decoder, DataType::INT32, bsz);
  const int64_t step_cols = check::matrix(kOp, "step_draft_tokens", step_draft_tokens,
                                          DataType::INT64, bsz, draft_cols);
  check::per_request(kOp, "step_seq_lens_this_time", step_seq_lens_this_time, DataType::INT32,
                     bsz);
  check::per_request(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  const int64_t accept_cols =
      check::matrix(kOp, "accept_tokens", accept_tokens, DataType::INT64, bsz);
  check::per_request(kOp, "is_block_step", is_block_step, DataType::BOOL, bsz);
  check::scalar(kOp, "not_need_stop", not_need_stop, DataType::BOOL);
  check::on_cpu(kOp, "not_need_stop", not_need_stop);
  check::scalar(kOp, "stop_nums", stop_nums, DataType::INT64);
  if (block_size < 1) check::fail(kOp, "block_size", "must be >= 1, got ", block_size);
  if (max_draft_tokens < 0)
    check::fail(kOp, "max_draft_tokens", "must be >= 0, got ", max_draft_tokens);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"draft_tokens", &draft_tokens},
                     {"block_tables", &block_tables},
                     {"stop_flags", &stop_flags},
                     {"prompt_lens", &prompt_lens},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"step_seq_lens_decoder", &step_seq_lens_decoder},
                     {"step_draft_tokens", &step_draft_tokens},
                     {"step_seq_lens_this_time", &step_seq_lens_this_time},
                     {"accept_num", &accept_num},
                     {"accept_tokens", &accept_tokens},
                     {"is_block_step", &is_block_step}});

  ScheduleCacheParams p{};
  p.draft_tokens = draft_tokens.data<int64_t>();
  p.draft_cols = draft_cols;
  p.block_tables = block_tables.data<int32_t>();
  p.num_blocks_per_seq = nb;
  p.stop_flags = stop_flags.data<bool>();
  p.prompt_lens = prompt_lens.data<int64_t>();
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.step_seq_lens_decoder = step_seq_lens_decoder.data<int32_t>();
  p.step_draft_tokens = step_draft_tokens.data<int64_t>();
  p.step_draft_cols = step_cols;
  p.step_seq_lens_this_time = step_seq_lens_this_time.data<int32_t>();
  p.accept_num = accept_num.data<int32_t>();
  p.accept_tokens = accept_tokens.data<int64_t>();
  p.accept_cols = accept_cols;
  p.is_block_step = is_block_step.data<bool>();
  p.bsz = bsz;
  p.max_bsz = max_bsz;
  p.block_size = block_size;
  p.max_draft_tokens = max_draft_tokens;
  p.prefill_one_step_stop = prefill_one_step_stop;

  static constexpr StatusInfo kStatus[] = {
      {kScheduleCacheSlot, "seq_lens_decoder",
       "is {value} for a decoding request; it must be >= {limit}"},
  };
  bool* out_flag = not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    check::on_cpu(kOp, "stop_nums", stop_nums);
    check::status(kOp, schedule_cache_cpu(p, stop_nums.data<int64_t>()[0], out_flag), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  // stop_nums is read on the host (a 1-element copy when it lives on the GPU).
  const int64_t limit = stop_nums.is_cpu() ? stop_nums.data<int64_t>()[0]
                                           : stop_nums.copy_to(paddle::CPUPlace(), true)
                                                 .data<int64_t>()[0];
  GpuScratch scratch(ref);
  check::cuda(kOp, speculate_schedule_cache_cuda(p, scratch.status(), scratch.count(),
                                                 ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(kOp, result.status, kStatus);
  *out_flag = result.count + (max_bsz - bsz) < limit;
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_schedule_cache)
    .Inputs({"draft_tokens", "block_tables", "stop_flags", "prompt_lens", "seq_lens_this_time",
             "seq_lens_encoder", "seq_lens_decoder", "step_seq_lens_decoder",
             "step_draft_tokens", "step_seq_lens_this_time", "accept_num", "accept_tokens",
             "is_block_step", "not_need_stop", "stop_nums"})
    .Outputs({"stop_flags_out", "seq_lens_this_time_out", "seq_lens_encoder_out",
              "seq_lens_decoder_out", "step_seq_lens_decoder_out", "step_draft_tokens_out",
              "step_seq_lens_this_time_out", "accept_num_out", "accept_tokens_out",
              "is_block_step_out", "not_need_stop_out"})
    .Attrs({"block_size: int", "max_draft_tokens: int", "prefill_one_step_stop: bool"})
    .SetInplaceMap({{"stop_flags", "stop_flags_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"step_seq_lens_decoder", "step_seq_lens_decoder_out"},
                    {"step_draft_tokens", "step_draft_tokens_out"},
                    {"step_seq_lens_this_time", "step_seq_lens_this_time_out"},
                    {"accept_num", "accept_num_out"},
                    {"accept_tokens", "accept_tokens_out"},
                    {"is_block_step", "is_block_step_out"},
                    {"not_need_stop", "not_need_stop_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateScheduleCache));
