// fd_mtp_mtp_step_paddle (spec §6.6, v0 scheduler)
#include <vector>

#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/mtp_step.h"

namespace {
constexpr const char* kOp = "mtp_step_paddle";
using paddle::DataType;
}  // namespace

// base_model_stop_flags: [>=bsz] bool, read
// stop_flags:            [>=bsz] bool, written
// batch_drop:            [>=bsz] bool, written
// seq_lens_this_time:    [bsz] int32, written (defines bsz)
// seq_lens_encoder:      [>=bsz] int32, unused
// seq_lens_decoder:      [>=bsz] int32, written
// block_tables:          [>=bsz, NB] int32, written
// encoder_block_lens:    [>=bsz] int32, written
// used_list_len:         [>=bsz] int32, written
// free_list:             [F] int32, written
// free_list_len:         [1] int32, written
void MtpStepPaddle(const paddle::Tensor& base_model_stop_flags, paddle::Tensor& stop_flags,
                   paddle::Tensor& batch_drop, paddle::Tensor& seq_lens_this_time,
                   const paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                   paddle::Tensor& block_tables, paddle::Tensor& encoder_block_lens,
                   paddle::Tensor& used_list_len, paddle::Tensor& free_list,
                   paddle::Tensor& free_list_len, int block_size, int max_draft_tokens) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::per_request(kOp, "base_model_stop_flags", base_model_stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "batch_drop", batch_drop, DataType::BOOL, bsz);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  const int64_t nb = check::matrix(kOp, "block_tables", block_tables, DataType::INT32, bsz);
  check::per_request(kOp, "encoder_block_lens", encoder_block_lens, DataType::INT32, bsz);
  check::per_request(kOp, "used_list_len", used_list_len, DataType::INT32, bsz);
  check::dtype(kOp, "free_list", free_list, DataType::INT32);
  check::scalar(kOp, "free_list_len", free_list_len, DataType::INT32);
  if (block_size < 1) check::fail(kOp, "block_size", "must be >= 1, got ", block_size);
  if (max_draft_tokens < 0)
    check::fail(kOp, "max_draft_tokens", "must be >= 0, got ", max_draft_tokens);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"base_model_stop_flags", &base_model_stop_flags},
                     {"stop_flags", &stop_flags},
                     {"batch_drop", &batch_drop},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"block_tables", &block_tables},
                     {"encoder_block_lens", &encoder_block_lens},
                     {"used_list_len", &used_list_len},
                     {"free_list", &free_list},
                     {"free_list_len", &free_list_len}});

  MtpStepParams p{};
  p.base_model_stop_flags = base_model_stop_flags.data<bool>();
  p.stop_flags = stop_flags.data<bool>();
  p.batch_drop = batch_drop.data<bool>();
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.block_tables = block_tables.data<int32_t>();
  p.num_blocks_per_seq = nb;
  p.encoder_block_lens = encoder_block_lens.data<int32_t>();
  p.used_list_len = used_list_len.data<int32_t>();
  p.free_list = free_list.data<int32_t>();
  p.free_list_capacity = free_list.numel();
  p.free_list_len = free_list_len.data<int32_t>();
  p.bsz = bsz;
  p.block_size = block_size;
  p.max_draft_tokens = max_draft_tokens;

  static constexpr StatusInfo kStatus[] = {
      {kMtpStepOutOfBlocks, "free_list",
       "is exhausted: {value} requests need a decode block but at most {limit} can be "
       "freed, and no request holds a decode block to preempt"},
      {kMtpStepFreeListFull, "free_list",
       "is too small: returned blocks would fill {value} entries but it has {limit}"},
      {kMtpStepUsedListLen, "used_list_len",
       "is {value}; with encoder_block_lens it must fit the block table row ({limit} slots)"},
      {kMtpStepFreeListLen, "free_list_len", "is {value}; it must be in [0, {limit}]"},
  };
  if (ref.is_cpu()) {
    std::vector<int32_t> need_list(static_cast<size_t>(bsz));
    p.need_list = need_list.data();
    check::status(kOp, mtp_step_cpu(p), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  auto need_list = paddle::empty({bsz > 0 ? bsz : 1}, DataType::INT32, ref.place());
  p.need_list = need_list.data<int32_t>();
  GpuScratch scratch(ref);
  check::cuda(kOp, mtp_step_cuda(p, scratch.status(), ref.stream()));
  check::status(kOp, scratch.fetch(ref.stream()).status, kStatus);
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_mtp_step_paddle)
    .Inputs({"base_model_stop_flags", "stop_flags", "batch_drop", "seq_lens_this_time",
             "seq_lens_encoder", "seq_lens_decoder", "block_tables", "encoder_block_lens",
             "used_list_len", "free_list", "free_list_len"})
    .Outputs({"stop_flags_out", "batch_drop_out", "seq_lens_this_time_out",
              "seq_lens_decoder_out", "block_tables_out", "encoder_block_lens_out",
              "used_list_len_out", "free_list_out", "free_list_len_out"})
    .Attrs({"block_size: int", "max_draft_tokens: int"})
    .SetInplaceMap({{"stop_flags", "stop_flags_out"},
                    {"batch_drop", "batch_drop_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"block_tables", "block_tables_out"},
                    {"encoder_block_lens", "encoder_block_lens_out"},
                    {"used_list_len", "used_list_len_out"},
                    {"free_list", "free_list_out"},
                    {"free_list_len", "free_list_len_out"}})
    .SetKernelFn(PD_KERNEL(MtpStepPaddle));
