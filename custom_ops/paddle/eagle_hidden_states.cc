// fd_mtp_eagle_get_hidden_states (spec §6.2) and
// fd_mtp_eagle_get_self_hidden_states (spec §6.4): row gathers of hidden states.
#include "check.h"
#include "ops.h"
#include "gpu_scratch.h"
#include "../kernels/eagle_hidden_states.h"

namespace {
using paddle::DataType;

constexpr fd_mtp::StatusInfo kStatus[] = {
    {fd_mtp::kEagleInputRows, "input",
     "the requests consume {value} rows but input has {limit} rows"},
    {fd_mtp::kEagleAcceptNums, "accept_nums",
     "is {value}; it must be in [0, base_model_seq_lens_this_time] = [0, {limit}]"},
    {fd_mtp::kEagleLastSeqLens, "last_seq_lens_this_time",
     "is {value} for a request that runs this substep (it must be >= {limit})"},
    {fd_mtp::kEagleNegativeCount, "seq_lens",
     "a token count is {value}; counts must be >= {limit}"},
};

// input: [Tin, H] float32 | float16 | bfloat16. Returns Tin.
int64_t check_hidden(const char* op, const paddle::Tensor& input) {
  fd_mtp::check::dtype_in(op, "input", input,
                          {DataType::FLOAT32, DataType::FLOAT16, DataType::BFLOAT16});
  if (input.shape().size() != 2)
    fd_mtp::check::fail(op, "input", "must be 2-D [tokens, hidden], got shape ",
                        fd_mtp::check::shape_str(input.shape()));
  return input.shape()[0];
}

// Counts output rows, allocates the output and copies the rows.
template <typename Params, typename PlanFn>
paddle::Tensor gather_rows(const char* op, const paddle::Tensor& input, const Params& p,
                           PlanFn plan) {
  using namespace fd_mtp;
  const int64_t in_rows = input.shape()[0];
  const int64_t hidden = input.shape()[1];
  const int64_t row_bytes = hidden * static_cast<int64_t>(phi::SizeOf(input.dtype()));
  if (input.is_cpu()) {
    int64_t out_rows = 0;
    check::status(op, row_gather_count_cpu(p, plan, in_rows, &out_rows), kStatus);
    auto out = paddle::empty({out_rows, hidden}, input.dtype(), input.place());
    row_gather_copy_cpu(p, plan, input.data(), out.data(), row_bytes);
    return out;
  }
  check::unsupported_place(op, "input", input);
}

}  // namespace

// input:                         [Tin, H] float32|float16|bfloat16, read (target hidden states)
// seq_lens_this_time:            [bsz] int32, read (draft, after preprocess; defines bsz)
// seq_lens_encoder:              [>=bsz] int32, read (draft)
// seq_lens_decoder, stop_flags:  [>=bsz] int32 / bool, unused
// accept_nums:                   [>=bsz] int32, read (target)
// base_model_seq_lens_this_time: [>=bsz] int32, read
// base_model_seq_lens_encoder:   [>=bsz] int32, unused
// returns                        [Tout, H], same dtype
std::vector<paddle::Tensor> EagleGetHiddenStates(
    const paddle::Tensor& input, const paddle::Tensor& seq_lens_this_time,
    const paddle::Tensor& seq_lens_encoder, const paddle::Tensor& seq_lens_decoder,
    const paddle::Tensor& stop_flags, const paddle::Tensor& accept_nums,
    const paddle::Tensor& base_model_seq_lens_this_time,
    const paddle::Tensor& base_model_seq_lens_encoder, int actual_draft_token_num) {
  using namespace fd_mtp;
  constexpr const char* kOp = "eagle_get_hidden_states";
  check_hidden(kOp, input);
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::per_request(kOp, "seq_lens_encoder", seq_lens_encoder, DataType::INT32, bsz);
  check::per_request(kOp, "seq_lens_decoder", seq_lens_decoder, DataType::INT32, bsz);
  check::per_request(kOp, "stop_flags", stop_flags, DataType::BOOL, bsz);
  check::per_request(kOp, "accept_nums", accept_nums, DataType::INT32, bsz);
  check::per_request(kOp, "base_model_seq_lens_this_time", base_model_seq_lens_this_time,
                     DataType::INT32, bsz);
  check::per_request(kOp, "base_model_seq_lens_encoder", base_model_seq_lens_encoder,
                     DataType::INT32, bsz);
  check::same_place(kOp, "input", input,
                    {{"seq_lens_this_time", &seq_lens_this_time},
                     {"seq_lens_encoder", &seq_lens_encoder},
                     {"accept_nums", &accept_nums},
                     {"base_model_seq_lens_this_time", &base_model_seq_lens_this_time}});
  const EagleHiddenStatesParams p{seq_lens_this_time.data<int32_t>(),
                                  seq_lens_encoder.data<int32_t>(), accept_nums.data<int32_t>(),
                                  base_model_seq_lens_this_time.data<int32_t>(), bsz};
#ifdef PADDLE_WITH_CUDA
  if (input.is_gpu()) {
    const int64_t in_rows = input.shape()[0];
    auto src = paddle::empty({in_rows > 0 ? in_rows : 1}, DataType::INT64, input.place());
    GpuScratch scratch(input);
    check::cuda(kOp, eagle_get_hidden_states_plan_cuda(p, in_rows, src.data<int64_t>(),
                                                       scratch.status(), scratch.count(),
                                                       input.stream()));
    const auto result = scratch.fetch(input.stream());
    check::status(kOp, result.status, kStatus);
    auto out = paddle::empty({result.count, input.shape()[1]}, input.dtype(), input.place());
    check::cuda(kOp, row_gather_copy_cuda(input.data(), out.data(), src.data<int64_t>(),
                                          result.count,
                                          input.shape()[1] * phi::SizeOf(input.dtype()),
                                          input.stream()));
    return {out};
  }
#endif
  return {gather_rows(kOp, input, p, eagle_hidden_states_plan)};
}

// input:                   [Tin, H] float32|float16|bfloat16, read (this substep's hidden)
// last_seq_lens_this_time: [>=bsz] int32, read (this_time before the substep)
// seq_lens_this_time:      [bsz] int32, read (after draft_model_update; defines bsz)
// step_idx:                [>=bsz] int64, read (after draft_model_update)
// returns                  [Tout, H], same dtype: one row per running request
std::vector<paddle::Tensor> EagleGetSelfHiddenStates(
    const paddle::Tensor& input, const paddle::Tensor& last_seq_lens_this_time,
    const paddle::Tensor& seq_lens_this_time, const paddle::Tensor& step_idx) {
  using namespace fd_mtp;
  constexpr const char* kOp = "eagle_get_self_hidden_states";
  check_hidden(kOp, input);
  const int64_t bsz =
      check::per_request(kOp, "seq_lens_this_time", seq_lens_this_time, DataType::INT32, 0);
  check::per_request(kOp, "last_seq_lens_this_time", last_seq_lens_this_time, DataType::INT32,
                     bsz);
  check::per_request(kOp, "step_idx", step_idx, DataType::INT64, bsz);
  check::same_place(kOp, "input", input,
                    {{"last_seq_lens_this_time", &last_seq_lens_this_time},
                     {"seq_lens_this_time", &seq_lens_this_time},
                     {"step_idx", &step_idx}});
  const EagleSelfHiddenStatesParams p{last_seq_lens_this_time.data<int32_t>(),
                                      seq_lens_this_time.data<int32_t>(),
                                      step_idx.data<int64_t>(), bsz};
#ifdef PADDLE_WITH_CUDA
  if (input.is_gpu()) {
    const int64_t in_rows = input.shape()[0];
    auto src = paddle::empty({in_rows > 0 ? in_rows : 1}, DataType::INT64, input.place());
    GpuScratch scratch(input);
    check::cuda(kOp, eagle_get_self_hidden_states_plan_cuda(p, in_rows, src.data<int64_t>(),
                                                            scratch.status(), scratch.count(),
                                                            input.stream()));
    const auto result = scratch.fetch(input.stream());
    check::status(kOp, result.status, kStatus);
    auto out = paddle::empty({result.count, input.shape()[1]}, input.dtype(), input.place());
    check::cuda(kOp, row_gather_copy_cuda(input.data(), out.data(), src.data<int64_t>(),
                                          result.count,
                                          input.shape()[1] * phi::SizeOf(input.dtype()),
                                          input.stream()));
    return {out};
  }
#endif
  return {gather_rows(kOp, input, p, eagle_self_hidden_states_plan)};
}

namespace {
std::vector<std::vector<int64_t>> HiddenShape(const std::vector<int64_t>& input_shape) {
  return {{-1, input_shape.size() == 2 ? input_shape[1] : -1}};
}
std::vector<paddle::DataType> HiddenDtype(const paddle::DataType& input_dtype) {
  return {input_dtype};
}
std::vector<std::vector<int64_t>> EagleHiddenShape(
    const std::vector<int64_t>& input, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&) {
  return HiddenShape(input);
}
std::vector<paddle::DataType> EagleHiddenDtype(
    const paddle::DataType& input, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&) {
  return HiddenDtype(input);
}
std::vector<std::vector<int64_t>> EagleSelfShape(const std::vector<int64_t>& input,
                                                 const std::vector<int64_t>&,
                                                 const std::vector<int64_t>&,
                                                 const std::vector<int64_t>&) {
  return HiddenShape(input);
}
std::vector<paddle::DataType> EagleSelfDtype(const paddle::DataType& input,
                                             const paddle::DataType&, const paddle::DataType&,
                                             const paddle::DataType&) {
  return HiddenDtype(input);
}
}  // namespace

PD_BUILD_OP(fd_mtp_eagle_get_hidden_states)
    .Inputs({"input", "seq_lens_this_time", "seq_lens_encoder", "seq_lens_decoder",
             "stop_flags", "accept_nums", "base_model_seq_lens_this_time",
             "base_model_seq_lens_encoder"})
    .Outputs({"out"})
    .Attrs({"actual_draft_token_num: int"})
    .SetKernelFn(PD_KERNEL(EagleGetHiddenStates))
    .SetInferShapeFn(PD_INFER_SHAPE(EagleHiddenShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(EagleHiddenDtype));

PD_BUILD_OP(fd_mtp_eagle_get_self_hidden_states)
    .Inputs({"input", "last_seq_lens_this_time", "seq_lens_this_time", "step_idx"})
    .Outputs({"out"})
    .SetKernelFn(PD_KERNEL(EagleGetSelfHiddenStates))
    .SetInferShapeFn(PD_INFER_SHAPE(EagleSelfShape))
    .SetInferDtypeFn(PD_INFER_DTYPE(EagleSelfDtype));
