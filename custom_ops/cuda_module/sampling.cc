// fd_mtp_cuda binding of the token penalty op (spec §5.5; top_p_candidates' is generated).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_sampling(py::module_& m) {
  // ------------------------------------------- token penalty multi scores ---
  {
    using P = TokenPenaltyParams;
    m.def("token_penalty_workspace_rows", &token_penalty_workspace_rows, py::arg("rows"),
          "Rows of the [rows, vocab] int32 zero workspace token_penalty needs.");
    m.def(
        "token_penalty",
        [](const P& p, uintptr_t workspace, int64_t workspace_rows, uintptr_t status,
           uintptr_t stream) {
          constexpr const char* op = "speculate_get_token_penalty_multi_scores";
          require(status, op, "status");
          if (p.rows > 0) require(workspace, op, "workspace");
          throw_if(token_penalty_cuda(p, as_ptr<int32_t>(workspace), workspace_rows,
                                      as_ptr<KernelStatus>(status), as_stream(stream)),
                   op);
          return finish_status(status, stream, op, "speculate_get_token_penalty_multi_scores");
        },
        py::arg("params"), py::arg("workspace"), py::arg("workspace_rows"), py::arg("status"),
        py::arg("stream") = 0,
        "workspace: [workspace_rows, vocab] int32, zero (left zero). "
        "Returns (code, request, value, limit).");
  }
}

}  // namespace pybind
}  // namespace fd_mtp
