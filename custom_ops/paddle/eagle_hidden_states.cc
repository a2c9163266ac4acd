// fd_mtp_eagle_get_hidden_states (spec §6.2) and fd_mtp_eagle_get_self_hidden_states
// (spec §6.4): row gathers of hidden states. Arguments, checks and registration:
// fd_mtp/schema/draft.py (generated into eagle_get_hidden_states.gen.h and
// eagle_get_self_hidden_states.gen.h).
#include "eagle_get_hidden_states.gen.h"
#include "eagle_get_self_hidden_states.gen.h"

namespace {

// Plans the rows (reporting the kernel status with `table`), allocates the [Tout, H] output of
// input's dtype and copies the rows: on the CPU through `plan`, on a GPU through `plan_cuda` (op
// `stream_op` of the stream's record). Tout is data: the GPU branch reads it back (the shape read
// of FastDeploy's op; the plan's source rows live in a persistent per-stream workspace).
template <typename Params, typename PlanFn, typename PlanCudaFn, size_t N>
paddle::Tensor gather_rows(const char* op, const paddle::Tensor& input, const Params& p,
                           PlanFn plan, PlanCudaFn plan_cuda, int32_t stream_op,
                           const fd_mtp::StatusInfo (&table)[N]) {
  using namespace fd_mtp;
  const int64_t in_rows = input.shape()[0];
  const int64_t hidden = input.shape()[1];
  const int64_t row_bytes = hidden * static_cast<int64_t>(phi::SizeOf(input.dtype()));
  if (input.is_cpu()) {
    int64_t out_rows = 0;
    check::status(op, row_gather_count_cpu(p, plan, in_rows, &out_rows), table);
    auto out = compat::empty({out_rows, hidden}, input.dtype(), input.place());
    row_gather_copy_cpu(p, plan, input.data(), out.data(), row_bytes);
    return out;
  }
#ifdef PADDLE_WITH_CUDA
  if (input.is_gpu()) {
    auto* src = static_cast<int64_t*>(gpu::workspace(
        op, input, "eagle_src_rows", (in_rows > 0 ? in_rows : 1) * sizeof(int64_t), false));
    gpu::Op g(op, stream_op, input);
    check::cuda(op, plan_cuda(p, in_rows, src, g.status(), g.count(), g.stream()));
    g.commit();
    const int64_t rows = g.host_count();  // the output's row count (raises the op's error)
    auto out = gpu::output({rows, hidden}, input.dtype(), input.place());
    check::cuda(op,
                row_gather_copy_cuda(input.data(), out.data(), src, rows, row_bytes, g.stream()));
    gpu::finish(op, input);
    return out;
  }
#else
  (void)plan_cuda;
  (void)stream_op;
#endif
  check::unsupported_place(op, "input", input);
}

#ifdef PADDLE_WITH_CUDA
constexpr auto kHiddenPlanCuda = fd_mtp::eagle_get_hidden_states_plan_cuda;
constexpr auto kSelfPlanCuda = fd_mtp::eagle_get_self_hidden_states_plan_cuda;
#else  // the CPU build has no launchers
constexpr std::nullptr_t kHiddenPlanCuda = nullptr;
constexpr std::nullptr_t kSelfPlanCuda = nullptr;
#endif

std::vector<std::vector<int64_t>> hidden_shape(const std::vector<int64_t>& input_shape) {
  return {{-1, input_shape.size() == 2 ? input_shape[1] : -1}};
}

}  // namespace

std::vector<paddle::Tensor> eagle_get_hidden_states_apply(EagleGetHiddenStatesArgs& a,
                                                          fd_mtp::EagleHiddenStatesParams& p) {
  return {gather_rows(a.op, a.input, p, fd_mtp::eagle_hidden_states_plan, kHiddenPlanCuda,
                      kEagleGetHiddenStatesStreamOp, kEagleGetHiddenStatesStatus)};
}

std::vector<paddle::Tensor> eagle_get_self_hidden_states_apply(
    EagleGetSelfHiddenStatesArgs& a, fd_mtp::EagleSelfHiddenStatesParams& p) {
  return {gather_rows(a.op, a.input, p, fd_mtp::eagle_self_hidden_states_plan, kSelfPlanCuda,
                      kEagleGetSelfHiddenStatesStreamOp, kEagleGetSelfHiddenStatesStatus)};
}

std::vector<std::vector<int64_t>> eagle_get_hidden_states_infer_shape(
    const std::vector<int64_t>& input_shape, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&, const std::vector<int64_t>&, int) {
  return hidden_shape(input_shape);
}

std::vector<paddle::DataType> eagle_get_hidden_states_infer_dtype(
    const paddle::DataType& input_dtype, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&, const paddle::DataType&) {
  return {input_dtype};
}

std::vector<std::vector<int64_t>> eagle_get_self_hidden_states_infer_shape(
    const std::vector<int64_t>& input_shape, const std::vector<int64_t>&,
    const std::vector<int64_t>&, const std::vector<int64_t>&) {
  return hidden_shape(input_shape);
}

std::vector<paddle::DataType> eagle_get_self_hidden_states_infer_dtype(
    const paddle::DataType& input_dtype, const paddle::DataType&, const paddle::DataType&,
    const paddle::DataType&) {
  return {input_dtype};
}
