// fd_mtp_draft_model_update (spec §6.3)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/draft_model_update.h"

namespace {
constexpr const char* kOp = "draft_model_update";
using paddle::DataType;
}  // namespace

// inter_next_tokens:       [Σo] (any shape, read flat) int64, read
// draft_tokens:            [>=bsz, Dd] int64, written
// pre_ids:                 [>=bsz, Lp >= 2] int64, written
// seq_lens_this_time:      [bsz] int32, written (defines bsz)
// seq_lens_encoder:        [>=bsz] int32, written
// seq_lens_decoder:        [>=bsz] int32, written
// step_idx:                [>=bsz] int64, written
// output_cum_offsets:      [>=bsz] int32, read
// stop_flags:              [>=bsz] bool, written
// not_need_stop:           [1] bool on the CPU, written
// max_dec_len:             [>=bsz] int64, read
// end_ids:                 [E >= 1] (or [E, 1]) int64, read
// base_model_draft_tokens: [>=bsz, Db > substep + 1] int64, written (column substep + 1)
void DraftModelUpdate(const paddle::Tensor& inter_next_tokens, paddle::Tensor& draft_tokens,
                      paddle::Tensor& pre_ids, paddle::Tensor& seq_lens_this_time,
                      paddle::Tensor& seq_lens_encoder, paddle::Tensor& seq_lens_decoder,
                      paddle::Tensor& step_idx, const paddle::Tensor& output_cum_offsets,
                      paddle::Tensor& stop_flags, paddle::Tensor& not_need_stop,
                      const paddle::Tensor& max_dec_len, const paddle::Tensor& end_ids,
                      paddle::Tensor& base_model_draft_tokens, int max_seq_len, int substep,
                      bool prefill_one_step_stop) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::dtype(kOp, "inter_next_tokens", inter_next_tokens, DataType::INT64);
  const int64_t draft_cols =
      check::matrix(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  const int64_t pre_cols = check::matrix(kOp, "pre_ids", pre_ids, DataType::INT64, bsz, 2);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  check::per_request(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  check::per_request(kOp, "output_cum_offsets", output_cum_offsets, DataType::INT32, bsz);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  check::scalar(kOp, "not_need_stop", not_need_stop, DataType::BOOL);
  check::on_cpu(kOp, "not_need_stop", not_need_stop);
  check::per_request(kOp, "max_dec_len", max_dec_len, DataType::INT64, bsz);
  check::dtype(kOp, "end_ids", end_ids, DataType::INT64);
  if (end_ids.numel() < 1) check::fail(kOp, "end_ids", "must hold at least one token id");
  if (substep < 0) check::fail(kOp, "substep", "must be >= 0, got ", substep);
  check::matrix(kOp, "base_model_draft_tokens", base_model_draft_tokens, DataType::INT64, bsz,
                static_cast<int64_t>(substep) + 2);
  if (max_seq_len < 1) check::fail(kOp, "max_seq_len", "must be >= 1, got ", max_seq_len);
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"inter_next_tokens", &inter_next_tokens},
                     {"draft_tokens", &draft_tokens},
                     {"pre_ids", &pre_ids},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"step_idx", &step_idx},
                     {"output_cum_offsets", &output_cum_offsets},
                     {"stop_flags", &stop_flags},
                     {"max_dec_len", &max_dec_len},
                     {"end_ids", &end_ids},
                     {"base_model_draft_tokens", &base_model_draft_tokens}});

  DraftModelUpdateParams p{};
  p.inter_next_tokens = inter_next_tokens.data<int64_t>();
  p.num_next_tokens = inter_next_tokens.numel();
  p.draft_tokens = draft_tokens.data<int64_t>();
  p.draft_tokens_cols = draft_cols;
  p.pre_ids = pre_ids.data<int64_t>();
  p.pre_ids_cols = pre_cols;
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.step_idx = step_idx.data<int64_t>();
  p.output_cum_offsets = output_cum_offsets.data<int32_t>();
  p.stop_flags = stop_flags.data<bool>();
  p.max_dec_len = max_dec_len.data<int64_t>();
  p.end_ids = end_ids.data<int64_t>();
  p.num_end_ids = end_ids.numel();
  p.base_model_draft_tokens = base_model_draft_tokens.data<int64_t>();
  p.base_model_draft_tokens_cols = base_model_draft_tokens.shape()[1];
  p.bsz = bsz;
  p.max_seq_len = max_seq_len;
  p.substep = substep;
  p.prefill_one_step_stop = prefill_one_step_stop;

  static constexpr StatusInfo kStatus[] = {
      {kUpdateNextTokensRow, "inter_next_tokens",
       "row {value} is read but there are {limit} rows (check output_cum_offsets, "
       "seq_lens_this_time and max_seq_len)"},
      {kUpdatePreIdsColumn, "pre_ids",
       "the sampled token goes to column {value} but the row has {limit} columns"},
      {kUpdateEmptyRunningRequest, "seq_lens_this_time",
       "is {value} for a request that is not stopped (it must be >= {limit})"},
  };
  bool* out_flag = not_need_stop.data<bool>();
  if (ref.is_cpu()) {
    check::status(kOp, draft_model_update_cpu(p, out_flag), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, draft_model_update_cuda(p, scratch.status(), scratch.count(), ref.stream()));
  const auto result = scratch.fetch(ref.stream());
  check::status(kOp, result.status, kStatus);
  *out_flag = result.count < bsz;
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_draft_model_update)
    .Inputs({"inter_next_tokens", "draft_tokens", "pre_ids", "seq_lens_this_time",
             "seq_lens_encoder", "seq_lens_decoder", "step_idx", "output_cum_offsets",
             "stop_flags", "not_need_stop", "max_dec_len", "end_ids",
             "base_model_draft_tokens"})
    .Outputs({"draft_tokens_out", "pre_ids_out", "seq_lens_this_time_out",
              "seq_lens_encoder_out", "seq_lens_decoder_out", "step_idx_out",
              "stop_flags_out", "not_need_stop_out", "base_model_draft_tokens_out"})
    .Attrs({"max_seq_len: int", "substep: int", "prefill_one_step_stop: bool"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"pre_ids", "pre_ids_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"},
                    {"seq_lens_encoder", "seq_lens_encoder_out"},
                    {"seq_lens_decoder", "seq_lens_decoder_out"},
                    {"step_idx", "step_idx_out"},
                    {"stop_flags", "stop_flags_out"},
                    {"not_need_stop", "not_need_stop_out"},
                    {"base_model_draft_tokens", "base_model_draft_tokens_out"}})
    .SetKernelFn(PD_KERNEL(DraftModelUpdate));
