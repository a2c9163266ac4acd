// fd_mtp_cuda bindings of the packed-layout ops (spec §5.1-§5.4).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_packing(py::module_& m) {
  // -------------------------------------------- speculate_get_padding_offset ---
  {
    using P = PaddingOffsetParams;
    m.def(
        "speculate_get_padding_offset",
        [](const P& p, uintptr_t status, uintptr_t total, uintptr_t stream) {
          constexpr const char* op = "speculate_get_padding_offset";
          require(status, op, "status");
          require(total, op, "total");
          throw_if(speculate_get_padding_offset_cuda(p, as_ptr<KernelStatus>(status),
                                                     as_ptr<int64_t>(total), as_stream(stream)),
                   op);
          return finish_status(status, stream, op, "speculate_get_padding_offset");
        },
        py::arg("params"), py::arg("status"), py::arg("total"), py::arg("stream") = 0,
        "total: int64 scratch (sum of seq_len). Returns (code, request, value, limit); "
        "the outputs are written only when code is 0.");
  }

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

  // ------------------------------------------- speculate_get_seq_lens_output ---
  {
    using P = SeqLensOutputParams;
    m.def(
        "speculate_get_seq_lens_output",
        [](const P& p, uintptr_t stream) {
          constexpr const char* op = "speculate_get_seq_lens_output";
          // The stream's preset: on a poisoned stream the op writes nothing (no status of its
          // own, nothing to commit).
          const StreamStatus* s = stream_status_for(stream, op);
          throw_if(speculate_get_seq_lens_output_cuda(p, &s->preset, as_stream(stream)), op);
          finish(stream, op);
        },
        py::arg("params"), py::arg("stream") = 0,
        "Writes params.seq_lens_output, nothing on a poisoned stream.");
  }

  // ------------------------------------- speculate_get_output_padding_offset ---
  {
    using P = OutputPaddingOffsetParams;
    m.def(
        "speculate_get_output_padding_offset",
        [](const P& p, uintptr_t status, uintptr_t total, uintptr_t stream) {
          constexpr const char* op = "speculate_get_output_padding_offset";
          require(status, op, "status");
          require(total, op, "total");
          throw_if(speculate_get_output_padding_offset_cuda(
                       p, as_ptr<KernelStatus>(status), as_ptr<int64_t>(total), as_stream(stream)),
                   op);
          return finish_status(status, stream, op, "speculate_get_output_padding_offset");
        },
        py::arg("params"), py::arg("status"), py::arg("total"), py::arg("stream") = 0,
        "total: int64 scratch (sum of seq_lens_output). Returns (code, request, value, limit); "
        "the outputs are written only when code is 0.");
  }

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
