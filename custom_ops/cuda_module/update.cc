// fd_mtp_cuda bindings of the target-side update ops (spec §5.8, §5.10, §5.12, §5.16).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_update(py::module_& m) {
  // ------------------------------------------- set_stop_value_multi_seqs ---
  {
    using P = SetStopValueParams;
    m.def(
        "speculate_set_stop_value_multi_seqs",
        [](const P& p, uintptr_t status, uintptr_t stream) {
          constexpr const char* op = "speculate_set_stop_value_multi_seqs";
          require(status, op, "status");
          throw_if(speculate_set_stop_value_multi_seqs_cuda(p, as_ptr<KernelStatus>(status),
                                                            as_stream(stream)),
                   op);
          return status_tuple(fetch_status(status, stream, op));
        },
        py::arg("params"), py::arg("status"), py::arg("stream") = 0,
        "Returns (code, request, value, limit).");
  }

  // ---------------------------------------------------- speculate_update ---
  {
    using P = SpeculateUpdateParams;
    m.def(
        "speculate_update",
        [](const P& p, uintptr_t status, uintptr_t stopped, uintptr_t stream) {
          constexpr const char* op = "speculate_update";
          require(status, op, "status");
          require(stopped, op, "stopped");
          throw_if(speculate_update_cuda(p, as_ptr<KernelStatus>(status), as_ptr<int64_t>(stopped),
                                         as_stream(stream)),
                   op);
          const KernelStatus st = fetch_status(status, stream, op);
          return py::make_tuple(status_tuple(st), fetch_int64(stopped, stream, op));
        },
        py::arg("params"), py::arg("status"), py::arg("stopped"), py::arg("stream") = 0,
        "Returns ((code, request, value, limit), stopped): slots counted as stopped.");
  }

  // ---------------------------------- speculate_set_value_by_flags_and_idx ---
  {
    using P = SetValueByFlagsParams;
    m.def(
        "speculate_set_value_by_flags_and_idx",
        [](const P& p, uintptr_t status, uintptr_t stream) {
          constexpr const char* op = "speculate_set_value_by_flags_and_idx";
          require(status, op, "status");
          throw_if(speculate_set_value_by_flags_and_idx_cuda(p, as_ptr<KernelStatus>(status),
                                                             as_stream(stream)),
                   op);
          return status_tuple(fetch_status(status, stream, op));
        },
        py::arg("params"), py::arg("status"), py::arg("stream") = 0,
        "Returns (code, request, value, limit).");
  }

  // ------------------------------------------- speculate_clear_accept_nums ---
  {
    using P = ClearAcceptNumsParams;
    m.def(
        "speculate_clear_accept_nums",
        [](const P& p, uintptr_t stream) {
          throw_if(speculate_clear_accept_nums_cuda(p, as_stream(stream)),
                   "speculate_clear_accept_nums");
          sync(stream, "speculate_clear_accept_nums");
        },
        py::arg("params"), py::arg("stream") = 0);
  }
}

}  // namespace pybind
}  // namespace fd_mtp
