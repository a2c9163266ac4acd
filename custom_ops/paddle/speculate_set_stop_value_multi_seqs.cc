// fd_mtp_speculate_set_stop_value_multi_seqs (spec §5.8)
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/speculate_set_stop_value_multi_seqs.h"

namespace {
constexpr const char* kOp = "speculate_set_stop_value_multi_seqs";
using paddle::DataType;
}  // namespace

// accept_tokens: [bs, Wa] int64, written (defines bs)
// accept_num:    [>=bs] int32, written
// pre_ids:       [>=bs, Lp] int64, read
// step_idx:      [>=bs] int64, read
// stop_flags:    [>=bs] bool, written
// seq_lens:      any, unused (kept for the signature)
// stop_seqs:     [>=bs, S, Ls] int64, read
// stop_seqs_len: [>=bs, S] int32, read
// end_ids:       [E >= 1] (or [E, 1]) int64, read (end_ids[0])
void SpeculateSetStopValueMultiSeqs(paddle::Tensor& accept_tokens, paddle::Tensor& accept_num,
                                    const paddle::Tensor& pre_ids, const paddle::Tensor& step_idx,
                                    paddle::Tensor& stop_flags, const paddle::Tensor& seq_lens,
                                    const paddle::Tensor& stop_seqs,
                                    const paddle::Tensor& stop_seqs_len,
                                    const paddle::Tensor& end_ids) {
  using namespace fd_mtp;
  check::dtype(kOp, "accept_tokens", accept_tokens, DataType::INT64);
  if (accept_tokens.shape().size() != 2)
    check::fail(kOp, "accept_tokens", "must be 2-D, got shape ", check::shape_str(accept_tokens.shape()));
  const int64_t bs = accept_tokens.shape()[0];
  const int64_t acc_cols = accept_tokens.shape()[1];
  check::per_request_from(kOp, "accept_num", accept_num, DataType::INT32, bs, "accept_tokens");
  const int64_t pre_cols = check::matrix(kOp, "pre_ids", pre_ids, DataType::INT64, bs);
  check::per_request_from(kOp, "step_idx", step_idx, DataType::INT64, bs, "accept_tokens");
  check::per_request_from(kOp, "stop_flags", stop_flags, DataType::BOOL, bs, "accept_tokens");
  check::dtype(kOp, "stop_seqs", stop_seqs, DataType::INT64);
  const auto& ss = stop_seqs.shape();
  if (ss.size() != 3)
    check::fail(kOp, "stop_seqs", "must be 3-D [bs, S, Ls], got shape ", check::shape_str(ss));
  if (ss[0] < bs)
    check::fail(kOp, "stop_seqs", "has ", ss[0], " rows but the batch has ", bs, " requests");
  const int64_t num_seqs = ss[1];
  const int64_t seq_cols = ss[2];
  const int64_t len_cols =
      check::matrix(kOp, "stop_seqs_len", stop_seqs_len, DataType::INT32, bs, 0);
  if (len_cols != num_seqs)
    check::fail(kOp, "stop_seqs_len", "must have S = ", num_seqs,
                " columns (stop_seqs.shape[1]), got shape ", check::shape_str(stop_seqs_len.shape()));
  check::dtype(kOp, "end_ids", end_ids, DataType::INT64);
  if (end_ids.numel() < 1) check::fail(kOp, "end_ids", "must hold at least one token id");
  const auto& ref = accept_tokens;
  check::same_place(kOp, "accept_tokens", ref,
                    {{"accept_num", &accept_num},
                     {"pre_ids", &pre_ids},
                     {"step_idx", &step_idx},
                     {"stop_flags", &stop_flags},
                     {"stop_seqs", &stop_seqs},
                     {"stop_seqs_len", &stop_seqs_len},
                     {"end_ids", &end_ids}});

  SetStopValueParams p{};
  p.accept_tokens = accept_tokens.data<int64_t>();
  p.accept_tokens_cols = acc_cols;
  p.accept_num = accept_num.data<int32_t>();
  p.pre_ids = pre_ids.data<int64_t>();
  p.pre_ids_cols = pre_cols;
  p.step_idx = step_idx.data<int64_t>();
  p.stop_flags = stop_flags.data<bool>();
  p.stop_seqs = stop_seqs.data<int64_t>();
  p.num_stop_seqs = num_seqs;
  p.stop_seq_cols = seq_cols;
  p.stop_seqs_len = stop_seqs_len.data<int32_t>();
  p.end_ids = end_ids.data<int64_t>();
  p.bs = bs;

  static constexpr StatusInfo kStatus[] = {
      {kStopAcceptNum, "accept_num",
       "is {value}; it must be in [0, {limit}] (columns of accept_tokens)"},
      {kStopSeqLen, "stop_seqs_len", "is {value}; it must be in [0, {limit}] (stop_seqs.shape[2])"},
      {kStopPreIdsColumn, "pre_ids",
       "column {value} (step_idx - accept_num) is compared but the row has {limit} columns"},
  };
  if (ref.is_cpu()) {
    check::status(kOp, set_stop_value_cpu(p), kStatus);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  GpuScratch scratch(ref);
  check::cuda(kOp, speculate_set_stop_value_multi_seqs_cuda(p, scratch.status(), ref.stream()));
  check::status(kOp, scratch.fetch(ref.stream()).status, kStatus);
#else
  check::unsupported_place(kOp, "accept_tokens", ref);
#endif
}

PD_BUILD_OP(fd_mtp_speculate_set_stop_value_multi_seqs)
    .Inputs({"accept_tokens", "accept_num", "pre_ids", "step_idx", "stop_flags", "seq_lens",
             "stop_seqs", "stop_seqs_len", "end_ids"})
    .Outputs({"accept_tokens_out", "accept_num_out", "stop_flags_out"})
    .SetInplaceMap({{"accept_tokens", "accept_tokens_out"},
                    {"accept_num", "accept_num_out"},
                    {"stop_flags", "stop_flags_out"}})
    .SetKernelFn(PD_KERNEL(SpeculateSetStopValueMultiSeqs));
