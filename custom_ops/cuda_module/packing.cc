// fd_mtp_cuda bindings of the packed layout's hand-written launcher: pre_process's cumsum (the
// packing ops' bindings are generated).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_packing(py::module_& m) {
  // ----------------------------------------------------------- packed_cum_offsets ---
  m.def(
      "packed_cum_offsets",
      [](uintptr_t lens, int64_t n, int32_t width, uintptr_t out, uintptr_t stream) {
        constexpr const char* op = "packed_cum_offsets";
        if (n > 0) {
          require(lens, op, "lens");
          require(out, op, "out");
        }
        throw_if(packed_cum_offsets_cuda(as_ptr<const int32_t>(lens), n, width,
                                         as_ptr<int32_t>(out), as_stream(stream)),
                 op);
        finish(stream, op);
      },
      py::arg("lens"), py::arg("n"), py::arg("width"), py::arg("out"), py::arg("stream") = 0,
      "out[b] = sum over i <= b of (width - lens[i]) for b < n (int32 lens and out): "
      "pre_process's cum_offsets on the device. Synchronises only in checked mode.");
}

}  // namespace pybind
}  // namespace fd_mtp
