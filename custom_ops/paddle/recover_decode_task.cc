// fd_mtp_recover_decode_task (spec §5.15, v1 scheduler)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/recover_decode_task.h"

namespace {
constexpr const char* kOp = "recover_decode_task";
using paddle::DataType;
}  // namespace

// stop_flags:              [>=bsz] bool, written
// seq_lens_this_time:      [bsz] int32, written (defines bsz)
// seq_lens_encoder:        [>=bsz] int32, written
// seq_lens_decoder:        [>=bsz] int32, written
// step_seq_lens_decoder:   [>=bsz] int32, read
// block_tables:            [>=bsz, NB] int32, read
// is_block_step:           [>=bsz] bool, written
// draft_tokens:            optional [>=bsz, Dd] int64, written (speculative variant)
// step_draft_tokens:       optional [>=bsz, Ds] int64, read
// step_seq_lens_this_time: optional [>=bsz] int32, read
//   (the three optional tensors are given together or not at all)
void RecoverDecodeTask(paddle::Tensor& stop_flags, paddle::Tensor& seq_lens_this_time,
                       paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                       const paddle::Tensor& step_seq_lens_decoder,
                       const paddle::Tensor& block_tables, paddle::Tensor& is_block_step,
                       paddle::optional<paddle::Tensor>& draft_tokens,
                       const paddle::optional<paddle::Tensor>& step_draft_tokens,
                       const paddle::optional<paddle::Tensor>& step_seq_lens_this_time,
                       int block_size, int max_draft_tokens) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  check::per_request(kOp, "step_seq_lens_decoder", step_seq_lens_decoder, DataType::INT32, bsz);
  const int64_t nb = check::matrix(kOp, "block_tables", block_tables, DataType::INT32, bsz);
  check::per_request(kOp, "is_block_step", is_block_step, DataType::BOOL, bsz);
  const bool spec = draft_tokens.is_initialized();
  if (step_draft_tokens.is_initialized() != spec ||
      step_seq_lens_this_time.is_initialized() != spec)
    check::fail(kOp, "draft_tokens",
                "and step_draft_tokens and step_seq_lens_this_time must all be given (speculative "
                "variant) or all be None");
  if (block_size < 1) check::fail(kOp, "block_size", "must be >= 1, got ", block_size);
  if (max_draft_tokens < 0)
    check::fail(kOp, "max_draft_tokens", "must be >= 0, got ", max_draft_tokens);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"stop_flags", &stop_flags},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"step_seq_lens_decoder", &step_seq_lens_decoder},
                     {"block_tables", &block_tables},
                     {"is_block_step", &is_block_step}});

  RecoverDecodeParams p{};
  p.stop_flags = stop_flags.data<bool>();
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.step_seq_lens_decoder = step_seq_lens_decoder.data<int32_t>();
  p.block_tables = block_tables.data<int32_t>();
  p.num_blocks_per_seq = nb;
  p.is_block_step = is_block_step.data<bool>();
  if (spec) {
    paddle::Tensor& draft = *draft_tokens;
    const paddle::Tensor& step_draft = *step_draft_tokens;
    const paddle::Tensor& step_this_time = *step_seq_lens_this_time;
    p.draft_cols = check::matrix(kOp, "draft_tokens", draft, DataType::INT64, bsz);
    p.step_draft_cols =
        check::matrix(kOp, "step_draft_tokens", step_draft, DataType::INT64, bsz);
    check::per_request(kOp, "step_seq_lens_this_time", step_this_time, DataType::INT32, bsz);
    check::same_place(kOp, "seq_lens_this_time", ref,
                      {{"draft_tokens", &draft},
                       {"step_draft_tokens", &step_draft},
                       {"step_seq_lens_this_time", &step_this_time}});
    p.draft_tokens = draft.data<int64_t>();
    p.step_draft_tokens = step_draft.data<int64_t>();
    p.step_seq_lens_this_time = step_this_time.data<int32_t>();
  }
  p.bsz = bsz;
  p.block_size = block_size;
  p.max_draft_tokens = max_draft_tokens;

  static constexpr StatusInfo kStatus[] = {
      {kRecoverSlot, "step_seq_lens_decoder",
       "is {value} for a block-stepped request; it must be >= {limit}"},
      {kRecoverThisTime, "step_seq_lens_this_time",
       "is {value}; the draft row it restores must fit [0, {limit}] columns of draft_tokens "
       "and step_draft_tokens"},
  };
  if (ref.is_cpu()) {
    check::status(kOp, recover_decode_cpu(p), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, recover_decode_task_cuda(p, scratch.status(), ref.stream()));
  check::status(kOp, scratch.fetch(ref.stream()).status, kStatus);
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_recover_decode_task)
    .Inputs({"stop_flags", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder",
             "step_seq_lens_decoder", "block_tables", "is_block_step",
             paddle::Optional("draft_tokens"), paddle::Optional("step_draft_tokens"),
             paddle::Optional("step_seq_lens_this_time")})
    .Outputs({"stop_flags_out", "seq_lens_this_time_out", "seq_lens_encoder_out",
              "seq_lens_decoder_out", "is_block_step_out", paddle::Optional("draft_tokens_out")})
    .Attrs({"block_size: int", "max_draft_tokens: int"})
    .SetInplaceMap({{"stop_flags", "stop_flags_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"is_block_step", "is_block_step_out"},
                    {paddle::Optional("draft_tokens"), paddle::Optional("draft_tokens_out")}})
    .SetKernelFn(PD_KERNEL(RecoverDecodeTask));
