// fd_mtp_cuda bindings of the draft-model ops whose dispatch is hand-written (spec §6); the
// standard-dispatch ones are bound in the generated cuda_launchers_gen.cc.
#include "common.h"

namespace fd_mtp {
namespace pybind {
namespace {

// An eagle gather without a host read (fd_mtp.cuda's padded variant): the plan,
// then the copy into `output` ([input_rows, row_bytes], the input's row count)
// with rows past the plan's count (live_rows, [1] int64, written on the device)
// zeroed. Returns finish_status's value (None when deferred).
template <typename Plan, typename P>
py::object gather_padded(Plan plan, const char* op, const char* op_name, const P& p,
                         int64_t input_rows, uintptr_t src_rows, uintptr_t status,
                         uintptr_t live_rows, uintptr_t input, uintptr_t output, int64_t row_bytes,
                         uintptr_t stream) {
  require(src_rows, op, "src_rows");
  require(status, op, "status");
  require(live_rows, op, "live_rows");
  if (input_rows < 0 || row_bytes < 0)
    throw std::invalid_argument(std::string(op) + ": input_rows and row_bytes must be >= 0");
  if (input_rows > 0 && row_bytes > 0) {
    require(input, op, "input");
    require(output, op, "output");
  }
  throw_if(plan(p, input_rows, as_ptr<int64_t>(src_rows), as_ptr<KernelStatus>(status),
                as_ptr<int64_t>(live_rows), as_stream(stream)),
           op);
  throw_if(row_gather_copy_padded_cuda(as_ptr<const void>(input), as_ptr<void>(output),
                                       as_ptr<const int64_t>(src_rows),
                                       as_ptr<const int64_t>(live_rows), input_rows, row_bytes,
                                       as_ptr<const KernelStatus>(status), as_stream(stream)),
           op);
  return finish_status(status, stream, op, op_name);
}

constexpr const char* kPaddedDoc =
    "The padded gather (no host read): plan, then output[k] = input[src_rows[k]] for k < the "
    "plan's count (written to live_rows, [1] int64, on the device), zero rows up to input_rows. "
    "Returns (code, request, value, limit) when checked, None when deferred.";

}  // namespace

void bind_draft(py::module_& m) {
  // ----------------------------------------------------------- eagle ---
  {
    using P = EagleHiddenStatesParams;
    m.def(
        "eagle_get_hidden_states_plan",
        [](const P& p, int64_t input_rows, uintptr_t src_rows, uintptr_t status, uintptr_t out_rows,
           uintptr_t stream) {
          constexpr const char* op = "eagle_get_hidden_states_plan";
          require(src_rows, op, "src_rows");
          require(status, op, "status");
          require(out_rows, op, "out_rows");
          throw_if(eagle_get_hidden_states_plan_cuda(p, input_rows, as_ptr<int64_t>(src_rows),
                                                     as_ptr<KernelStatus>(status),
                                                     as_ptr<int64_t>(out_rows), as_stream(stream)),
                   op);
          const KernelStatus st = fetch_status(status, stream, op);
          return py::make_tuple(status_tuple(st), fetch_int64(out_rows, stream, op));
        },
        py::arg("params"), py::arg("input_rows"), py::arg("src_rows"), py::arg("status"),
        py::arg("out_rows"), py::arg("stream") = 0,
        "Plans the gather into src_rows ([max(input_rows, 1)] int64). "
        "Returns ((code, request, value, limit), out_rows).");
  }
  {
    using P = EagleSelfHiddenStatesParams;
    m.def(
        "eagle_get_self_hidden_states_plan",
        [](const P& p, int64_t input_rows, uintptr_t src_rows, uintptr_t status, uintptr_t out_rows,
           uintptr_t stream) {
          constexpr const char* op = "eagle_get_self_hidden_states_plan";
          require(src_rows, op, "src_rows");
          require(status, op, "status");
          require(out_rows, op, "out_rows");
          throw_if(eagle_get_self_hidden_states_plan_cuda(
                       p, input_rows, as_ptr<int64_t>(src_rows), as_ptr<KernelStatus>(status),
                       as_ptr<int64_t>(out_rows), as_stream(stream)),
                   op);
          const KernelStatus st = fetch_status(status, stream, op);
          return py::make_tuple(status_tuple(st), fetch_int64(out_rows, stream, op));
        },
        py::arg("params"), py::arg("input_rows"), py::arg("src_rows"), py::arg("status"),
        py::arg("out_rows"), py::arg("stream") = 0,
        "Plans the gather into src_rows ([max(input_rows, 1)] int64). "
        "Returns ((code, request, value, limit), out_rows).");
  }
  m.def(
      "eagle_get_hidden_states_padded",
      [](const EagleHiddenStatesParams& p, int64_t input_rows, uintptr_t src_rows, uintptr_t status,
         uintptr_t live_rows, uintptr_t input, uintptr_t output, int64_t row_bytes,
         uintptr_t stream) {
        return gather_padded(eagle_get_hidden_states_plan_cuda, "eagle_get_hidden_states_padded",
                             "eagle_get_hidden_states", p, input_rows, src_rows, status, live_rows,
                             input, output, row_bytes, stream);
      },
      py::arg("params"), py::arg("input_rows"), py::arg("src_rows"), py::arg("status"),
      py::arg("live_rows"), py::arg("input"), py::arg("output"), py::arg("row_bytes"),
      py::arg("stream") = 0, kPaddedDoc);
  m.def(
      "eagle_get_self_hidden_states_padded",
      [](const EagleSelfHiddenStatesParams& p, int64_t input_rows, uintptr_t src_rows,
         uintptr_t status, uintptr_t live_rows, uintptr_t input, uintptr_t output,
         int64_t row_bytes, uintptr_t stream) {
        return gather_padded(eagle_get_self_hidden_states_plan_cuda,
                             "eagle_get_self_hidden_states_padded", "eagle_get_self_hidden_states",
                             p, input_rows, src_rows, status, live_rows, input, output, row_bytes,
                             stream);
      },
      py::arg("params"), py::arg("input_rows"), py::arg("src_rows"), py::arg("status"),
      py::arg("live_rows"), py::arg("input"), py::arg("output"), py::arg("row_bytes"),
      py::arg("stream") = 0, kPaddedDoc);
  m.def(
      "row_gather_copy",
      [](uintptr_t input, uintptr_t output, uintptr_t src_rows, int64_t out_rows, int64_t row_bytes,
         uintptr_t stream) {
        constexpr const char* op = "row_gather_copy";
        if (out_rows < 0 || row_bytes < 0)
          throw std::invalid_argument("row_gather_copy: out_rows and row_bytes must be >= 0");
        if (out_rows > 0 && row_bytes > 0) {
          require(input, op, "input");
          require(output, op, "output");
          require(src_rows, op, "src_rows");
        }
        throw_if(row_gather_copy_cuda(as_ptr<const void>(input), as_ptr<void>(output),
                                      as_ptr<const int64_t>(src_rows), out_rows, row_bytes,
                                      as_stream(stream)),
                 op);
        finish(stream, op);
      },
      py::arg("input"), py::arg("output"), py::arg("src_rows"), py::arg("out_rows"),
      py::arg("row_bytes"), py::arg("stream") = 0,
      "output[k] = input[src_rows[k]] for k < out_rows, rows of row_bytes bytes.");
}

}  // namespace pybind
}  // namespace fd_mtp
