// fd_mtp_cuda bindings of the packed layout's hand-written launchers: pre_process's cumsum and
// rebuild_padding (spec §5.4; the other packing ops' bindings are generated).
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

  // --------------------------------------------------------- rebuild_padding ---
  {
    using P = RebuildPaddingParams;
    m.def(
        "rebuild_padding",
        [](const P& p, uintptr_t status, uintptr_t stream) {
          constexpr const char* op = "rebuild_padding";
          require(status, op, "status");
          if (p.output_padding_offset != nullptr && p.max_input_length < 1)
            throw std::invalid_argument("rebuild_padding: max_input_length must be >= 1");
          throw_if(rebuild_padding_cuda(p, as_ptr<KernelStatus>(status), as_stream(stream)), op);
          return finish_status(status, stream, op, "rebuild_padding");
        },
        py::arg("params"), py::arg("status"), py::arg("stream") = 0,
        "params.output_padding_offset = 0 selects the plain branch (out_rows = bsz). "
        "Returns (code, request, value, limit); out is written only when code is 0.");
  }
  {
    using P = RebuildPaddingParams;
    m.def(
        "rebuild_padding_padded",
        [](const P& p, uintptr_t live_rows, uintptr_t status, uintptr_t stream) {
          constexpr const char* op = "rebuild_padding_padded";
          require(status, op, "status");
          require(live_rows, op, "live_rows");
          if (p.output_padding_offset == nullptr || p.max_input_length < 1)
            throw std::invalid_argument(
                "rebuild_padding_padded: the speculative branch only (output_padding_offset set, "
                "max_input_length >= 1)");
          throw_if(rebuild_padding_padded_cuda(p, as_ptr<int64_t>(live_rows),
                                               as_ptr<KernelStatus>(status), as_stream(stream)),
                   op);
          return finish_status(status, stream, op, "rebuild_padding");
        },
        py::arg("params"), py::arg("live_rows"), py::arg("status"), py::arg("stream") = 0,
        "The padded speculative branch: params.out_rows is the capacity; R is computed on the "
        "device into live_rows ([1] int64), rows >= R are zero. No host read. Returns "
        "(code, request, value, limit) when checked, None when deferred.");
  }
}

}  // namespace pybind
}  // namespace fd_mtp
