// fd_mtp_cuda: the n-gram ops' CPU driver on host pointers (spec §5.17, §6.7; their device
// bindings are generated).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_ngram(py::module_& m) {
  using P = NgramParams;

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
      "The CPU driver of the n-gram ops (params.hybrid) on HOST pointers. "
      "Returns (code, request, value, limit).");
}

}  // namespace pybind
}  // namespace fd_mtp
