// fd_mtp_cuda binding of the Philox4x32-10 generator speculate_verify draws from (spec §5.7;
// the op itself is bound in the generated cuda_launchers_gen.cc).
#include "common.h"

namespace fd_mtp {
namespace pybind {

void bind_verify(py::module_& m) {
  m.def(
      "philox4x32_10",
      [](uintptr_t input, uintptr_t output, int64_t n, uintptr_t stream) {
        constexpr const char* op = "philox4x32_10";
        if (n > 0) {
          require(input, op, "input");
          require(output, op, "output");
        }
        throw_if(philox4x32_10_cuda(as_ptr<const uint32_t>(input), as_ptr<uint32_t>(output), n,
                                    as_stream(stream)),
                 op);
        sync(stream, op);
      },
      py::arg("input"), py::arg("output"), py::arg("n"), py::arg("stream") = 0,
      "output[i, 0:4] = Philox4x32-10(counter = input[i, 0:4], key = input[i, 4:6]) (uint32).");
}

}  // namespace pybind
}  // namespace fd_mtp
