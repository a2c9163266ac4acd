// fd_mtp_ngram_match (spec §5.17) and fd_mtp_hybrid_mtp_ngram (spec §6.7)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/ngram.h"

namespace {
using paddle::DataType;

constexpr fd_mtp::StatusInfo kNgramStatusInfo[] = {
    {fd_mtp::kNgramInputIdsLen, "input_ids_len",
     "is {value}; it must be in [0, {limit}] (the columns of input_ids)"},
    {fd_mtp::kNgramStepIdx, "step_idx",
     "is {value}; the query ends at pre_ids[step_idx] but the row has {limit} columns"},
    {fd_mtp::kNgramDraftTokensCols, "draft_tokens",
     "row needs {value} columns for the drafts this request may receive but has {limit}"},
    {fd_mtp::kNgramThisTime, "seq_lens_this_time",
     "is {value} for a request that drafts; it must be >= 1"},
};

// Shared by both ops: checks everything but the op-specific tensors, fills
// the common fields of `p`, runs the op on the tensors' device.
void RunNgram(const char* op, fd_mtp::NgramParams& p, const paddle::Tensor& input_ids,
              const paddle::Tensor& input_ids_len, const paddle::Tensor& pre_ids,
              const paddle::Tensor& step_idx, paddle::Tensor& draft_tokens,
              paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_decoder,
              const paddle::Tensor& max_dec_len, int max_ngram_size, int min_ngram_size,
              const std::vector<std::pair<const char*, const paddle::Tensor*>>& extra) {
  using namespace fd_mtp;
  const int64_t bsz =
      check::per_request(op, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  const int64_t input_cols = check::matrix(op, "input_ids", input_ids, DataType::INT64, bsz);
  check::per_request(op, "input_ids_len", input_ids_len, DataType::INT64, bsz);
  const int64_t pre_cols = check::matrix(op, "pre_ids", pre_ids, DataType::INT64, bsz);
  check::per_request(op, "step_idx", step_idx, DataType::INT64, bsz);
  const int64_t draft_cols =
      check::matrix(op, "draft_tokens", draft_tokens, DataType::INT64, bsz);
  check::per_request(op, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  check::per_request(op, "max_dec_len", max_dec_len, DataType::INT64, bsz);
  if (max_ngram_size < 1) check::fail(op, "max_ngram_size", "must be >= 1, got ", max_ngram_size);
  if (min_ngram_size < 1) check::fail(op, "min_ngram_size", "must be >= 1, got ", min_ngram_size);
  if (min_ngram_size > max_ngram_size)
    check::fail(op, "min_ngram_size", "must be <= max_ngram_size (", max_ngram_size, "), got ",
                min_ngram_size);
  const auto& ref = seq_lens_this_time;
  for (const auto& a : extra) check::same_place(op, a.first, *a.second, ref, "seq_lens_this_time");
  check::same_place(op, "seq_lens_this_time", ref,
                    {{"input_ids", &input_ids},
                     {"input_ids_len", &input_ids_len},
                     {"pre_ids", &pre_ids},
                     {"step_idx", &step_idx},
                     {"draft_tokens", &draft_tokens},
                     {"seq_lens_decoder", &seq_lens_decoder},
                     {"max_dec_len", &max_dec_len}});

  p.input_ids = input_ids.data<int64_t>();
  p.input_ids_cols = input_cols;
  p.input_ids_len = input_ids_len.data<int64_t>();
  p.pre_ids = pre_ids.data<int64_t>();
  p.pre_ids_cols = pre_cols;
  p.step_idx = step_idx.data<int64_t>();
  p.draft_tokens = draft_tokens.data<int64_t>();
  p.draft_tokens_cols = draft_cols;
  p.seq_lens_this_time = seq_lens_this_time.data<int32_t>();
  p.seq_lens_decoder = seq_lens_decoder.data<int32_t>();
  p.max_dec_len = max_dec_len.data<int64_t>();
  p.bsz = bsz;
  p.max_ngram_size = max_ngram_size;
  p.min_ngram_size = min_ngram_size;

  if (ref.is_cpu()) {
    check::status(op, ngram_cpu(p), kNgramStatusInfo);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  auto hits = paddle::empty({bsz > 0 ? bsz : 1}, DataType::INT64, ref.place());
  check::cuda(op, ngram_cuda(p, hits.data<int64_t>(), scratch.status(), ref.stream()));
  check::status(op, scratch.fetch(ref.stream()).status, kNgramStatusInfo);
#else
  check::unsupported_place(op, "seq_lens_this_time", ref);
#endif
}
}  // namespace

// input_ids:          [>=bsz, Li] int64, read (prompt haystack)
// input_ids_len:      [>=bsz] (or [>=bsz, 1]) int64, read (prompt length, <= Li)
// pre_ids:            [>=bsz, Lp] int64, read (generated token k at column k)
// step_idx:           [>=bsz] int64, read (< Lp for requests that search)
// draft_token_num:    [>=bsz] int32, read
// draft_tokens:       [>=bsz, Dd] int64, written (columns 1 .. q)
// seq_lens_this_time: [bsz] int32, written (defines bsz)
// seq_lens_encoder:   [>=bsz] int32, read
// seq_lens_decoder:   [>=bsz] int32, read
// max_dec_len:        [>=bsz] int64, read
void NgramMatch(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
                const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                const paddle::Tensor& draft_token_num, paddle::Tensor& draft_tokens,
                paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_encoder,
                const paddle::Tensor& seq_lens_decoder, const paddle::Tensor& max_dec_len,
                int max_ngram_size, int max_draft_tokens, int threshold) {
  using namespace fd_mtp;
  constexpr const char* kOp = "ngram_match";
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::per_request(kOp, "draft_token_num", draft_token_num, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  NgramParams p{};
  p.draft_token_num = draft_token_num.data<int32_t>();
  p.seq_lens_encoder = seq_lens_encoder.data<int32_t>();
  p.max_draft_tokens = max_draft_tokens;  // ignored, as upstream
  p.threshold = threshold;
  p.hybrid = false;
  RunNgram(kOp, p, input_ids, input_ids_len, pre_ids, step_idx, draft_tokens, seq_lens_this_time,
           seq_lens_decoder, max_dec_len, max_ngram_size, 1,
           {{"draft_token_num", &draft_token_num}, {"seq_lens_encoder", &seq_lens_encoder}});
}

PD_BUILD_OP(fd_mtp_ngram_match)
    .Inputs({"input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num",
             "draft_tokens", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder",
             "max_dec_len"})
    .Outputs({"draft_tokens_out", "seq_lens_this_time_out"})
    .Attrs({"max_ngram_size: int", "max_draft_tokens: int", "threshold: int"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"}})
    .SetKernelFn(PD_KERNEL(NgramMatch));

// input_ids:          [>=bsz, Li] int64, read (the proposer's prompt haystack)
// input_ids_len:      [>=bsz] (or [>=bsz, 1]) int64, read (<= Li)
// pre_ids:            [>=bsz, Lp] int64, read (the proposer's history)
// step_idx:           [>=bsz] int64, read (< Lp for requests that search)
// draft_token_num:    any, unused (kept for the signature)
// draft_tokens:       [>=bsz, Dd] int64, written (columns q0 .. K)
// seq_lens_this_time: [bsz] int32, written (defines bsz)
// seq_lens_decoder:   [>=bsz] int32, read
// max_dec_len:        [>=bsz] int64, read
void HybridMtpNgram(const paddle::Tensor& input_ids, const paddle::Tensor& input_ids_len,
                    const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                    const paddle::Tensor& draft_token_num, paddle::Tensor& draft_tokens,
                    paddle::Tensor& seq_lens_this_time, const paddle::Tensor& seq_lens_decoder,
                    const paddle::Tensor& max_dec_len, int max_ngram_size, int min_ngram_size,
                    int max_draft_tokens, int threshold) {
  using namespace fd_mtp;
  NgramParams p{};
  p.max_draft_tokens = max_draft_tokens;
  p.threshold = threshold;
  p.hybrid = true;
  RunNgram("hybrid_mtp_ngram", p, input_ids, input_ids_len, pre_ids, step_idx, draft_tokens,
           seq_lens_this_time, seq_lens_decoder, max_dec_len, max_ngram_size, min_ngram_size, {});
}

PD_BUILD_OP(fd_mtp_hybrid_mtp_ngram)
    .Inputs({"input_ids", "input_ids_len", "pre_ids", "step_idx", "draft_token_num",
             "draft_tokens", "seq_lens_this_time", "seq_lens_decoder", "max_dec_len"})
    .Outputs({"draft_tokens_out", "seq_lens_this_time_out"})
    .Attrs({"max_ngram_size: int", "min_ngram_size: int", "max_draft_tokens: int",
            "threshold: int"})
    .SetInplaceMap({{"draft_tokens", "draft_tokens_out"},
                    {"seq_lens_this_time", "seq_lens_this_time_out"}})
    .SetKernelFn(PD_KERNEL(HybridMtpNgram));
