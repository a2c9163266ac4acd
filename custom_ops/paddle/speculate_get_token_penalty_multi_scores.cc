// fd_mtp_speculate_get_token_penalty_multi_scores (spec §5.5)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_get_token_penalty_multi_scores.h"

namespace {
constexpr const char* kOp = "speculate_get_token_penalty_multi_scores";
using paddle::DataType;

constexpr fd_mtp::StatusInfo kStatus[] = {
    {fd_mtp::kPenaltyEosId, "eos_token_id",
     "holds id {value}; ids must be in [0, vocab) = [0, {limit})"},
    {fd_mtp::kPenaltyPreIds, "pre_ids",
     "holds id {value} among the counted ids; ids must be < vocab = {limit}"},
    {fd_mtp::kPenaltyOffset, "output_padding_offset",
     "gives logits row {value} the offset {limit}: a negative position"},
};
}  // namespace

// pre_ids:               [>=bs, Lp] int64, read
// logits:                [T, V] float32|float16|bfloat16, written
// penalty_scores:        [>=bs] (or [>=bs, 1]) logits dtype, read
// frequency_scores:      [>=bs] logits dtype, read
// presence_scores:       [>=bs] logits dtype, read
// temperatures:          [>=bs] float32, read
// bad_tokens:            [Lb] or [*, Lb] int64, read (row 0 only)
// cur_len:               [>=bs] int64, read (step_idx)
// min_len:               [>=bs] int64, read
// eos_token_id:          [E] or [E, 1] int64, read
// seq_lens_this_time:    [bs] int32, shape only (defines bs)
// output_padding_offset: [>=T] int32, read
// output_cum_offsets:    [>=bs] int32, read
void SpeculateGetTokenPenaltyMultiScores(
    const paddle::Tensor& pre_ids, paddle::Tensor& logits, const paddle::Tensor& penalty_scores,
    const paddle::Tensor& frequency_scores, const paddle::Tensor& presence_scores,
    const paddle::Tensor& temperatures, const paddle::Tensor& bad_tokens,
    const paddle::Tensor& cur_len, const paddle::Tensor& min_len,
    const paddle::Tensor& eos_token_id, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& output_padding_offset, const paddle::Tensor& output_cum_offsets,
    int64_t max_seq_len) {
  using namespace fd_mtp;
  check::dtype_in(kOp, "logits", logits,
                  {DataType::FLOAT32, DataType::FLOAT16, DataType::BFLOAT16});
  if (logits.shape().size() != 2)
    check::fail(kOp, "logits", "must be 2-D [tokens, vocab], got shape ",
                check::shape_str(logits.shape()));
  const int64_t rows = logits.shape()[0];
  const int64_t vocab = logits.shape()[1];
  if (vocab < 1) check::fail(kOp, "logits", "must have at least one column, got shape ",
                             check::shape_str(logits.shape()));
  const int64_t bs =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  const int64_t pre_cols = check::matrix(kOp, "pre_ids", pre_ids, DataType::INT64, bs);
  check::per_request(kOp, "penalty_scores", penalty_scores, logits.dtype(), bs);
  check::per_request(kOp, "frequency_scores", frequency_scores, logits.dtype(), bs);
  check::per_request(kOp, "presence_scores", presence_scores, logits.dtype(), bs);
  check::per_request(kOp, "temperatures", temperatures, DataType::FLOAT32, bs);
  check::dtype(kOp, "bad_tokens", bad_tokens, DataType::INT64);
  const auto& bad_shape = bad_tokens.shape();
  if (bad_shape.size() != 1 && bad_shape.size() != 2)
    check::fail(kOp, "bad_tokens", "must be [Lb] or [rows, Lb], got shape ",
                check::shape_str(bad_shape));
  const int64_t num_bad = bad_tokens.numel() == 0 ? 0 : bad_shape.back();
  check::per_request(kOp, "cur_len", cur_len, DataType::INT64, bs);
  check::per_request(kOp, "min_len", min_len, DataType::INT64, bs);
  check::dtype(kOp, "eos_token_id", eos_token_id, DataType::INT64);
  const auto& eos_shape = eos_token_id.shape();
  if (!(eos_shape.size() == 1 || (eos_shape.size() == 2 && eos_shape[1] == 1)))
    check::fail(kOp, "eos_token_id", "must have shape [E] or [E, 1], got ",
                check::shape_str(eos_shape));
  check::per_row(kOp, "output_padding_offset", output_padding_offset, DataType::INT32, rows,
                 "logits");
  check::per_request(kOp, "output_cum_offsets", output_cum_offsets, DataType::INT32, bs);
  if (max_seq_len < 1) check::fail(kOp, "max_seq_len", "must be >= 1, got ", max_seq_len);
  check::same_place(kOp, "logits", logits,
                    {{"pre_ids", &pre_ids},
                     {"penalty_scores", &penalty_scores},
                     {"frequency_scores", &frequency_scores},
                     {"presence_scores", &presence_scores},
                     {"temperatures", &temperatures},
                     {"bad_tokens", &bad_tokens},
                     {"cur_len", &cur_len},
                     {"min_len", &min_len},
                     {"eos_token_id", &eos_token_id},
                     {"output_padding_offset", &output_padding_offset},
                     {"output_cum_offsets", &output_cum_offsets}});

  TokenPenaltyParams p{};
  p.pre_ids = pre_ids.data<int64_t>();
  p.pre_ids_cols = pre_cols;
  p.logits = logits.data();
  p.rows = rows;
  p.vocab = vocab;
  p.float_kind = check::float_kind_of(logits);
  p.penalty_scores = penalty_scores.data();
  p.frequency_scores = frequency_scores.data();
  p.presence_scores = presence_scores.data();
  p.temperatures = temperatures.data<float>();
  p.bad_tokens = bad_tokens.data<int64_t>();
  p.num_bad_tokens = num_bad;
  p.cur_len = cur_len.data<int64_t>();
  p.min_len = min_len.data<int64_t>();
  p.eos_token_id = eos_token_id.data<int64_t>();
  p.num_eos = eos_token_id.numel();
  p.output_padding_offset = output_padding_offset.data<int32_t>();
  p.output_cum_offsets = output_cum_offsets.data<int32_t>();
  p.bs = bs;
  p.max_seq_len = max_seq_len;
  if (rows == 0) return;
  if (logits.is_cpu()) {
    check::status(kOp, token_penalty_cpu(p), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  const int64_t ws_rows = token_penalty_workspace_rows(rows);
  auto workspace = paddle::full({ws_rows, vocab}, 0, DataType::INT32, logits.place());
  GpuScratch scratch(logits);
  check::cuda(kOp, token_penalty_cuda(p, workspace.data<int32_t>(), ws_rows, scratch.status(),
                                      logits.stream()));
  check::status(kOp, scratch.fetch(logits.stream()).status, kStatus);
#else
  check::unsupported_place(kOp, "logits", logits);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_get_token_penalty_multi_scores)
    .Inputs({"pre_ids", "logits", "penalty_scores", "frequency_scores", "presence_scores",
             "temperatures", "bad_tokens", "cur_len", "min_len", "eos_token_id",
             "seq_lens_this_time", "output_padding_offset", "output_cum_offsets"})
    .Outputs({"logits_out"})
    .Attrs({"max_seq_len: int64_t"})
    .SetInplaceMap({{"logits", "logits_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateGetTokenPenaltyMultiScores));
