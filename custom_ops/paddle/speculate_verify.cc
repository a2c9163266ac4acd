// fd_mtp_speculate_verify (spec §5.7)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_verify.h"

namespace {
constexpr const char* kOp = "speculate_verify";
using paddle::DataType;

// Rows of a [rows, cols] matrix with the given dtype and column count (cols < 0: any >= 1).
int64_t rows_of(const char* arg, const paddle::Tensor& t, DataType dt, int64_t cols) {
  using namespace fd_mtp;
  check::dtype(kOp, arg, t, dt);
  const auto& s = t.shape();
  if (s.size() != 2) check::fail(kOp, arg, "must be 2-D, got shape ", check::shape_str(s));
  if (cols < 0 && s[1] < 1)
    check::fail(kOp, arg, "needs at least 1 column, got shape ", check::shape_str(s));
  if (cols >= 0 && s[1] != cols)
    check::fail(kOp, arg, "must have ", cols, " columns, got shape ", check::shape_str(s));
  return s[0];
}
}  // namespace

// sampled_token_ids:       [T_s] or [T_s, 1] int64, read (target_match strategy)
// accept_tokens:           [Bm >= bsz, Wa] int64, written
// accept_num:              [>=bsz] int32, written (running requests only)
// step_idx:                [>=bsz] int64, written
// stop_flags:              [>=bsz] bool, written
// seq_lens_encoder:        [>=bsz] int32, read
// seq_lens_decoder:        [>=bsz] int32, unused
// draft_tokens:            [>=bsz, D] int64, read
// seq_lens_this_time:      [bsz] int32, read (defines bsz)
// verify_tokens:           [T, C] int64, read
// verify_scores:           [T_v, C] float32, read
// max_dec_len:             [>=bsz] int64, read
// end_tokens:              [E >= 1] (or [E, 1]) int64, read
// is_block_step:           [>=bsz] bool, read
// output_cum_offsets:      [>=bsz] int32, read
// actual_candidate_len:    [T_c] or [T_c, 1] int32, read
// actual_draft_token_nums: [>=bsz] int32, unused
// topp:                    [>=bsz] float32, read
// target_probs:            optional [T_p, V] float32, read (rejection strategy, required there)
// draft_probs:             optional [T_q, V] float32, read (rejection strategy)
void SpeculateVerify(const paddle::Tensor& sampled_token_ids, paddle::Tensor& accept_tokens,
                     paddle::Tensor& accept_num, paddle::Tensor& step_idx,
                     paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens_encoder,
                     const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& draft_tokens,
                     const paddle::Tensor& seq_lens_this_time,
                     const paddle::Tensor& verify_tokens, const paddle::Tensor& verify_scores,
                     const paddle::Tensor& max_dec_len, const paddle::Tensor& end_tokens,
                     const paddle::Tensor& is_block_step,
                     const paddle::Tensor& output_cum_offsets,
                     const paddle::Tensor& actual_candidate_len,
                     const paddle::Tensor& actual_draft_token_nums, const paddle::Tensor& topp,
                     const paddle::optional<paddle::Tensor>& target_probs,
                     const paddle::optional<paddle::Tensor>& draft_probs, int max_seq_len,
                     int verify_window, bool enable_topp, bool benchmark_mode,
                     bool accept_all_drafts, int strategy, bool prefill_one_step_stop,
                     int64_t seed, int64_t offset) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  const int64_t sampled_rows =
      check::per_request(kOp, "sampled_token_ids", sampled_token_ids, DataType::INT64, 0);
  const int64_t accept_cols =
      check::matrix(kOp, "accept_tokens", accept_tokens, DataType::INT64, bsz);
  check::per_request(kOp, "accept_num", accept_num, DataType::INT32, bsz);
  check::per_request(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  const int64_t draft_cols =
      check::matrix(kOp, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  const int64_t verify_rows = rows_of("verify_tokens", verify_tokens, DataType::INT64, -1);
  const int64_t num_candidates = verify_tokens.shape()[1];
  const int64_t score_rows =
      rows_of("verify_scores", verify_scores, DataType::FLOAT32, num_candidates);
  check::per_request(kOp, "max_dec_len", max_dec_len, DataType::INT64, bsz);
  check::dtype(kOp, "end_tokens", end_tokens, DataType::INT64);
  if (end_tokens.numel() < 1) check::fail(kOp, "end_tokens", "must hold at least one token id");
  check::per_request(kOp, "is_block_step", is_block_step, DataType::BOOL, bsz);
  check::per_request(kOp, "output_cum_offsets", output_cum_offsets, DataType::INT32, bsz);
  const int64_t candidate_len_rows = check::per_request(
      kOp, "actual_candidate_len", actual_candidate_len, DataType::INT32, 0);
  check::per_request(kOp, "actual_draft_token_nums", actual_draft_token_nums, DataType::INT32,
                     bsz);
  check::per_request(kOp, "topp", topp, DataType::FLOAT32, bsz);
  if (max_seq_len < 1) check::fail(kOp, "max_seq_len", "must be >= 1, got ", max_seq_len);
  if (verify_window < 0) check::fail(kOp, "verify_window", "must be >= 0, got ", verify_window);
  if (strategy < kVerifyTopP || strategy > kVerifyRejection)
    check::fail(kOp, "verify_strategy", "must be 0..4, got ", strategy);
  if (seed < 0) check::fail(kOp, "seed", "must be >= 0, got ", seed);
  if (offset < 0) check::fail(kOp, "offset", "must be >= 0, got ", offset);
  const bool rejection = strategy == kVerifyRejection;
  // The Python wrapper refuses target_probs=None for "rejection". Paddle hands a
  // zero-size optional input over as absent: then no row exists, and the
  // kernel's row check names target_probs if a request needs one.
  int64_t target_rows = 0, draft_prob_rows = 0, vocab = 0;
  if (rejection && target_probs) {
    target_rows = rows_of("target_probs", *target_probs, DataType::FLOAT32, -1);
    vocab = target_probs->shape()[1];
    if (draft_probs) draft_prob_rows = rows_of("draft_probs", *draft_probs, DataType::FLOAT32, vocab);
  }
  const auto& ref = seq_lens_this_time;
  check::same_place(kOp, "seq_lens_this_time", ref,
                    {{"sampled_token_ids", &sampled_token_ids},
                     {"accept_tokens", &accept_tokens},
                     {"accept_num", &accept_num},
                     {"step_idx", &step_idx},
                     {"stop_flags", &stop_flags},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"draft_tokens", &draft_tokens},
                     {"verify_tokens", &verify_tokens},
                     {"verify_scores", &verify_scores},
                     {"max_dec_len", &max_dec_len},
                     {"end_tokens", &end_tokens},
                     {"is_block_step", &is_block_step},
                     {"output_cum_offsets", &output_cum_offsets},
                     {"actual_candidate_len", &actual_candidate_len},
                     {"actual_draft_token_nums", &actual_draft_token_nums},
                     {"topp", &topp}});
  if (rejection && target_probs) {
    check::same_place(kOp, "target_probs", *target_probs, ref, "seq_lens_this_time");
    if (draft_probs) check::same_place(kOp, "draft_probs", *draft_probs, ref, "seq_lens_this_time");
  }

  SpeculateVerifyParams p{};
  p.sampled_token_ids = sampled_token_ids.data<int64_t>();
  p.sampled_rows = sampled_rows;
  p.accept_tokens = accept_tokens.data<int64_t>();
  p.accept_cols = accept_cols;
  p.accept_num = accept_num.data<int32_t>();
  p.step_idx = step_idx.data<int64_t>();
  p.stop_flags = stop_flags.data<bool>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.draft_tokens = draft_tokens.data<int64_t>();
  p.draft_cols = draft_cols;
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.verify_tokens = verify_tokens.data<int64_t>();
  p.verify_rows = verify_rows;
  p.verify_scores = verify_scores.data<float>();
  p.score_rows = score_rows;
  p.num_candidates = num_candidates;
  p.max_dec_len = max_dec_len.data<int64_t>();
  p.end_tokens = end_tokens.data<int64_t>();
  p.num_end_tokens = end_tokens.numel();
  p.is_block_step = is_block_step.data<bool>();
  p.output_cum_offsets = output_cum_offsets.data<int32_t>();
  p.actual_candidate_len = actual_candidate_len.data<int32_t>();
  p.candidate_len_rows = candidate_len_rows;
  p.topp = topp.data<float>();
  if (rejection && target_probs) {
    p.target_probs = target_probs->data<float>();
    p.target_rows = target_rows;
    p.draft_probs = draft_probs ? draft_probs->data<float>() : nullptr;
    p.draft_prob_rows = draft_prob_rows;
    p.vocab = vocab;
  }
  p.bsz = bsz;
  p.max_seq_len = max_seq_len;
  p.verify_window = verify_window;
  p.seed = static_cast<uint64_t>(seed);
  p.offset = static_cast<uint64_t>(offset);
  p.strategy = strategy;
  p.enable_topp = enable_topp;
  p.benchmark_mode = benchmark_mode;
  p.accept_all_drafts = accept_all_drafts;
  p.prefill_one_step_stop = prefill_one_step_stop;

  static constexpr StatusInfo kStatus[] = {
      {kVerifyDraftWidth, "draft_tokens",
       "the request verifies {value} tokens (seq_lens_this_time) but the row has {limit} columns"},
      {kVerifyAcceptWidth, "accept_tokens",
       "the request may accept {value} tokens (seq_lens_this_time) but the row has {limit} "
       "columns"},
      {kVerifyRowStart, "output_cum_offsets",
       "gives first output row {value}; it must be >= {limit}"},
      {kVerifyRowsVerifyTokens, "verify_tokens",
       "row {value} is read but there are {limit} rows (check output_cum_offsets, "
       "seq_lens_this_time and max_seq_len)"},
      {kVerifyRowsVerifyScores, "verify_scores", "row {value} is read but there are {limit} rows"},
      {kVerifyRowsCandidateLen, "actual_candidate_len",
       "row {value} is read but there are {limit} rows"},
      {kVerifyRowsSampled, "sampled_token_ids", "row {value} is read but there are {limit} rows"},
      {kVerifyRowsTargetProbs, "target_probs", "row {value} is read but there are {limit} rows"},
      {kVerifyRowsDraftProbs, "draft_probs", "row {value} is read but there are {limit} rows"},
      {kVerifyDraftId, "draft_tokens",
       "holds token id {value}, outside the vocabulary [0, {limit}) of target_probs"},
  };
  if (ref.is_cpu()) {
    check::status(kOp, speculate_verify_cpu(p), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, speculate_verify_cuda(p, scratch.status(), ref.stream()));
  check::status(kOp, scratch.fetch(ref.stream()).status, kStatus);
#else
  check::unsupported_place(kOp, "seq_lens_this_time", ref);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_verify)
    .Inputs({"sampled_token_ids", "accept_tokens", "accept_num", "step_idx", "stop_flags",
             "seq_lens_encoder", "seq_lens_decoder", "draft_tokens", "seq_lens_this_time",
             "verify_tokens", "verify_scores", "max_dec_len", "end_tokens", "is_block_step",
             "output_cum_offsets", "actual_candidate_len", "actual_draft_token_nums", "topp",
             paddle::Optional("target_probs"), paddle::Optional("draft_probs")})
    .Outputs({"accept_tokens_out", "accept_num_out", "step_idx_out", "stop_flags_out"})
    .Attrs({"max_seq_len: int", "verify_window: int", "enable_topp: bool",
            "benchmark_mode: bool", "accept_all_drafts: bool", "strategy: int",
            "prefill_one_step_stop: bool", "seed: int64_t", "offset: int64_t"})
    .SetInplaceMap({{"accept_tokens", "accept_tokens_out"},
                    {"accept_num", "accept_num_out"},
                    {"step_idx", "step_idx_out"},
                    {"stop_flags", "stop_flags_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateVerify));
