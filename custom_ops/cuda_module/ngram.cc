// fd_mtp_cuda bindings of the n-gram drafting ops (spec §5.17 ngram_match, §6.7 hybrid_mtp_ngram).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_ngram(py::module_& m) {
  using P = NgramParams;

  m.def(
      "ngram",
      [](const P& p, uintptr_t hits, uintptr_t status, uintptr_t stream) {
        constexpr const char* op = "ngram";
        require(hits, op, "hits");
        require(status, op, "status");
        throw_if(
            ngram_cuda(p, as_ptr<int64_t>(hits), as_ptr<KernelStatus>(status), as_stream(stream)),
            op);
        return finish_status(status, stream, op, p.hybrid ? "hybrid_mtp_ngram" : "ngram_match");
      },
      py::arg("params"), py::arg("hits"), py::arg("status"), py::arg("stream") = 0,
      "ngram_match (params.hybrid false) or hybrid_mtp_ngram (true) on device pointers. "
      "hits: [max(bsz, 1)] int64 workspace. Returns (code, request, value, limit), or None in "
      "deferred mode (set_deferred).");

  // The CPU driver on host pointers (e.g. numpy arrays' addresses): the CPU op
  // without paddle, so that a paddle-less GPU machine can compare and time it.
  m.def(
      "ngram_host",
      [](const P& p) {
        KernelStatus st{};
        {
          py::gil_scoped_release release;
          st = ngram_cpu(p);
        }
        return status_tuple(st);
      },
      py::arg("params"),
      "The CPU driver of ngram_match / hybrid_mtp_ngram on HOST pointers. "
      "Returns (code, request, value, limit).");
}

}  // namespace pybind
}  // namespace fd_mtp
