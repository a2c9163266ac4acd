// fd_mtp_cuda bindings of the block managers (spec §5.13-§5.15).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_blocks(py::module_& m) {
  // ------------------------------------------- speculate_schedule_cache ---
  {
    using P = ScheduleCacheParams;
    m.def(
        "speculate_schedule_cache",
        [](const P& p, uintptr_t status, uintptr_t stopped, uintptr_t stream) {
          constexpr const char* op = "speculate_schedule_cache";
          require(status, op, "status");
          require(stopped, op, "stopped");
          throw_if(speculate_schedule_cache_cuda(p, as_ptr<KernelStatus>(status),
                                                 as_ptr<int64_t>(stopped), as_stream(stream)),
                   op);
          const KernelStatus st = fetch_status(status, stream, op);
          return py::make_tuple(status_tuple(st), fetch_int64(stopped, stream, op));
        },
        py::arg("params"), py::arg("status"), py::arg("stopped"), py::arg("stream") = 0,
        "Returns ((code, request, value, limit), stopped): stopped = requests b < bsz stopped "
        "after the call.");
  }

  // ------------------------------------------------ recover_decode_task ---
  {
    using P = RecoverDecodeParams;
    m.def(
        "recover_decode_task",
        [](const P& p, uintptr_t status, uintptr_t stream) {
          constexpr const char* op = "recover_decode_task";
          require(status, op, "status");
          throw_if(recover_decode_task_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)),
                   op);
          return status_tuple(fetch_status(status, stream, op));
        },
        py::arg("params"), py::arg("status"), py::arg("stream") = 0,
        "draft_tokens/step_draft_tokens/step_seq_lens_this_time all 0 = non-speculative "
        "variant. Returns (code, request, value, limit).");
  }

  // ---------------------------------------------- speculate_step_paddle ---
  {
    using P = SpeculateStepParams;
    m.def(
        "speculate_step",
        [](const P& p, uintptr_t status, uintptr_t stream) {
          constexpr const char* op = "speculate_step";
          require(status, op, "status");
          throw_if(speculate_step_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
          return status_tuple(fetch_status(status, stream, op));
        },
        py::arg("params"), py::arg("status"), py::arg("stream") = 0,
        "Returns (code, request, value, limit).");
  }
}

}  // namespace pybind
}  // namespace fd_mtp
