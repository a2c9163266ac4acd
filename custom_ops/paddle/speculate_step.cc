// fd_mtp_speculate_step_paddle (spec §5.13, v0 scheduler)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_step.h"

namespace {
constexpr const char* kOp = "speculate_step_paddle";
using paddle::DataType;
}  // namespace

// stop_flags:             [>=bsz] bool, written
// seq_lens_this_time:     [bsz] int32, written (defines bsz)
// ori_seq_lens_encoder:   [>=bsz] int32, read (prompt lengths: step_seq_lens_encoder)
// seq_lens_encoder:       [>=bsz] int32, written
// seq_lens_decoder:       [>=bsz] int32, written
// block_tables:           [>=bsz, NB] int32, written
// encoder_block_lens:     [>=bsz] int32, written
// is_block_step:          [>=bsz] bool, written
// step_block_list:        [S] int32, written
// step_lens:              [1] int32, written
// recover_block_list:     [R] int32, written
// recover_lens:           [1] int32, written (0 on entry and exit)
// need_block_list:        [N] int32, written
// need_block_len:         [1] int32, written (0 on entry and exit)
// used_list_len:          [>=bsz] int32, written
// free_list:              [F] int32, written
// free_list_len:          [1] int32, written
// input_ids:              [>=bsz, L] int64, written (re-prefill rows)
// pre_ids:                [>=bsz, Lp] int64, read
// step_idx:               [>=bsz] int64, read
// next_tokens:            any, unused
// first_token_ids:        [>=bsz] int64, written
// accept_num:             [>=bsz] int32, written
void SpeculateStepPaddle(
    paddle::Tensor& stop_flags, paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& ori_seq_lens_encoder, paddle::Tensor& seq_lens_encoder,
    paddle::Tensor& seq_lens_decoder, paddle::Tensor& block_tables,
    paddle::Tensor& encoder_block_lens, paddle::Tensor& is_block_step,
    paddle::Tensor& step_block_list, paddle::Tensor& step_lens,
    paddle::Tensor& recover_block_list, paddle::Tensor& recover_lens,
    paddle::Tensor& need_block_list, paddle::Tensor& need_block_len,
    paddle::Tensor& used_list_len, paddle::Tensor& free_list, paddle::Tensor& free_list_len,
    paddle::Tensor& input_ids, const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
    const paddle::Tensor& next_tokens, paddle::Tensor& first_token_ids,
    paddle::Tensor& accept_num, int block_size, int encoder_decoder_block_num,
    int max_draft_tokens) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "ori_seq_lens_encoder", ori_seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  const int64_t nb = check::matrix(kOp, "block_tables", block_tables, DataType::INT32, bsz);
  check::per_request(kOp, "encoder_block_lens", encoder_block_lens, DataType::INT32, bsz);
  check::per_request(kOp, "is_block_step", is_block_step, DataType::BOOL, bsz);
  check::dtype(kOp, "step_block_list", step_block_list, DataType::INT32);
  check::scalar(kOp, "step_lens", step_lens, DataType::INT32);
  check::dtype(kOp, "recover_block_list", recover_block_list, DataType::INT32);
  check::scalar(kOp, "recover_lens", recover_lens, DataType::INT32);
  check::dtype(kOp, "need_block_list", need_block_list, DataType::INT32);
  check::scalar(kOp, "need_block_len", need_block_len, DataType::INT32);
  check::per_request(kOp, "used_list_len", used_list_len, DataType::INT32, bsz);
  check::dtype(kOp, "free_list", free_list, DataType::INT32);
  check::scalar(kOp, "free_list_len", free_list_len, DataType::INT32);
  const int64_t input_cols = check::matrix(kOp, "input_ids", input_ids, DataType::INT64, bsz);
  const int64_t pre_cols = check::matrix(kOp, "pre_ids", pre_ids, DataType::INT64, bsz);
  check::per_request(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  check::per_request(kOp, "first_token_ids", first_token_ids, DataType::INT64, bsz);
  check::per_request(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  if (block_size < 1) check::fail(kOp, "block_size", "must be >= 1, got ", block_size);
  if (max_draft_tokens < 0)
    check::fail(kOp, "max_draft_tokens", "must be >= 0, got ", max_draft_tokens);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"stop_flags", &stop_flags},
                     {"ori_seq_lens_encoder", &ori_seq_lens_encoder},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"block_tables", &block_tables},
                     {"encoder_block_lens", &encoder_block_lens},
                     {"is_block_step", &is_block_step},
                     {"step_block_list", &step_block_list},
                     {"step_lens", &step_lens},
                     {"recover_block_list", &recover_block_list},
                     {"recover_lens", &recover_lens},
                     {"need_block_list", &need_block_list},
                     {"need_block_len", &need_block_len},
                     {"used_list_len", &used_list_len},
                     {"free_list", &free_list},
                     {"free_list_len", &free_list_len},
                     {"input_ids", &input_ids},
                     {"pre_ids", &pre_ids},
                     {"step_idx", &step_idx},
                     {"first_token_ids", &first_token_ids},
                     {"accept_num", &accept_num}});

  SpeculateStepParams p{};
  p.stop_flags = stop_flags.data<bool>();
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.ori_seq_lens_encoder = ori_seq_lens_encoder.data<int32_t>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.block_tables = block_tables.data<int32_t>();
  p.num_blocks_per_seq = nb;
  p.encoder_block_lens = encoder_block_lens.data<int32_t>();
  p.is_block_step = is_block_step.data<bool>();
  p.step_block_list = step_block_list.data<int32_t>();
  p.step_list_capacity = step_block_list.numel();
  p.step_lens = step_lens.data<int32_t>();
  p.recover_block_list = recover_block_list.data<int32_t>();
  p.recover_list_capacity = recover_block_list.numel();
  p.recover_lens = recover_lens.data<int32_t>();
  p.need_block_list = need_block_list.data<int32_t>();
  p.need_list_capacity = need_block_list.numel();
  p.need_block_len = need_block_len.data<int32_t>();
  p.used_list_len = used_list_len.data<int32_t>();
  p.free_list = free_list.data<int32_t>();
  p.free_list_capacity = free_list.numel();
  p.free_list_len = free_list_len.data<int32_t>();
  p.input_ids = input_ids.data<int64_t>();
  p.input_ids_cols = input_cols;
  p.pre_ids = pre_ids.data<int64_t>();
  p.pre_ids_cols = pre_cols;
  p.step_idx = step_idx.data<int64_t>();
  p.first_token_ids = first_token_ids.data<int64_t>();
  p.accept_num = accept_num.data<int32_t>();
  p.bsz = bsz;
  p.block_size = block_size;
  p.max_draft_tokens = max_draft_tokens;

  static constexpr StatusInfo kStatus[] = {
      {kStepOutOfBlocks, "free_list",
       "is exhausted: {value} requests need a decode block, {limit} are free, and no running "
       "request holds a decode block to preempt"},
      {kStepFreeListFull, "free_list",
       "is too small: returned blocks would fill {value} entries but it has {limit}"},
      {kStepUsedListLen, "used_list_len",
       "is {value}; with encoder_block_lens it must fit the block table row ({limit} slots)"},
      {kStepFreeListLen, "free_list_len", "is {value}; it must be in [0, {limit}]"},
      {kStepStepLens, "step_lens", "is {value}; it must be in [0, {limit}] (step_block_list size)"},
      {kStepStepListFull, "step_block_list",
       "is too small: preemption pushes entry {value} but it has {limit}"},
      {kStepStepListEntry, "step_block_list",
       "the request to recover is {value}; it must be in [0, {limit})"},
      {kStepNeedLen, "need_block_len", "is {value} on entry; it must be {limit}"},
      {kStepRecoverLens, "recover_lens", "is {value} on entry; it must be {limit}"},
      {kStepNeedListFull, "need_block_list",
       "is too small: {value} requests need a block but it has {limit} entries"},
      {kStepRecoverListFull, "recover_block_list",
       "is too small: a recovery needs {value} entry but it has {limit}"},
      {kStepDecoder, "seq_lens_decoder",
       "is {value} for a running request; it must be >= {limit}"},
      {kStepRecoverBlocks, "encoder_block_lens",
       "with the blocks granted on recovery the row needs {value} slots but it has {limit} "
       "(or max_decoder_block_num = input_ids columns / block_size is below encoder_block_lens)"},
      {kStepOriLen, "ori_seq_lens_encoder",
       "is {value} for the request to recover; it must be >= {limit}"},
      {kStepStepIdx, "step_idx",
       "is {value} for the request to recover; its generated tokens pre_ids[1..step_idx] must "
       "fit pre_ids (step_idx in [0, {limit}])"},
      {kStepInputIds, "input_ids",
       "the re-prefill (prompt + generated tokens) needs {value} columns but the row has "
       "{limit}"},
  };
  if (ref.is_cpu()) {
    check::status(kOp, speculate_step_cpu(p), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, speculate_step_cuda(p, scratch.status(), ref.stream()));
  check::status(kOp, scratch.fetch(ref.stream()).status, kStatus);
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_step_paddle)
    .Inputs({"stop_flags", "seq_lens_this_time", "ori_seq_lens_encoder", "seq_lens_encoder",
             "seq_lens_decoder", "block_tables", "encoder_block_lens", "is_block_step",
             "step_block_list", "step_lens", "recover_block_list", "recover_lens",
             "need_block_list", "need_block_len", "used_list_len", "free_list",
             "free_list_len", "input_ids", "pre_ids", "step_idx", "next_tokens",
             "first_token_ids", "accept_num"})
    .Outputs({"stop_flags_out", "seq_lens_this_time_out", "seq_lens_encoder_out",
              "seq_lens_decoder_out", "block_tables_out", "encoder_block_lens_out",
              "is_block_step_out", "step_block_list_out", "step_lens_out",
              "recover_block_list_out", "recover_lens_out", "need_block_list_out",
              "need_block_len_out", "used_list_len_out", "free_list_out", "free_list_len_out",
              "input_ids_out", "first_token_ids_out", "accept_num_out"})
    .Attrs({"block_size: int", "encoder_decoder_block_num: int", "max_draft_tokens: int"})
    .SetInplaceMap({{"stop_flags", "stop_flags_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"block_tables", "block_tables_out"},
                    {"encoder_block_lens", "encoder_block_lens_out"},
                    {"is_block_step", "is_block_step_out"},
                    {"step_block_list", "step_block_list_out"},
                    {"step_lens", "step_lens_out"},
                    {"recover_block_list", "recover_block_list_out"},
                    {"recover_lens", "recover_lens_out"},
                    {"need_block_list", "need_block_list_out"},
                    {"need_block_len", "need_block_len_out"},
                    {"used_list_len", "used_list_len_out"},
                    {"free_list", "free_list_out"},
                    {"free_list_len", "free_list_len_out"},
                    {"input_ids", "input_ids_out"},
                    {"first_token_ids", "first_token_ids_out"},
                    {"accept_num", "accept_num_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateStepPaddle));
