// fd_mtp_cuda: the CUDA launchers on raw device pointers, for testing the CUDA
// kernels with CuPy where Paddle-GPU is absent. Framework-free (no paddle).
//
// Each op's parameter struct is exposed as a Python class whose pointer fields
// take integer device addresses (CuPy: `array.data.ptr`) and whose size fields
// take ints; `fd_mtp.cuda` fills them from arrays. Launchers take the params
// plus integer device addresses of the scratch they need (a KernelStatus of
// STATUS_BYTES bytes, an int64 counter, workspaces) and a stream (default 0:
// the legacy default stream). Every call synchronises the stream and raises
// RuntimeError on a CUDA error.
//
// A launcher of an op that validates its input returns the kernel status read
// back from `status` as a tuple (code, request, value, limit), code 0 meaning
// fine (when it is not 0 the launch wrote nothing else); launchers with a
// counter return (status_tuple, count). `read_status` / `read_int64` read such
// buffers back on their own.
#include "common.h"

namespace fd_mtp {
namespace pybind {
// One function per group of ops, each in its own file of custom_ops/cuda_module/.
void bind_blocks(py::module_& m);
void bind_draft(py::module_& m);
void bind_ipc(py::module_& m);
void bind_update(py::module_& m);
void bind_packing(py::module_& m);
void bind_sampling(py::module_& m);
void bind_verify(py::module_& m);
void bind_ngram(py::module_& m);
}  // namespace pybind
}  // namespace fd_mtp

using namespace fd_mtp;
using namespace fd_mtp::pybind;

PYBIND11_MODULE(fd_mtp_cuda, m) {
  m.doc() = "fd_mtp CUDA launchers on raw device pointers (see fd_mtp.cuda)";
  m.attr("STATUS_BYTES") = py::int_(sizeof(KernelStatus));
  static_assert(sizeof(KernelStatus) == 24, "KernelStatus is {int32, int32, int64, int64}");

  m.def("read_status", [](uintptr_t status, uintptr_t stream) {
    require(status, "read_status", "status");
    return status_tuple(fetch_status(status, stream, "read_status"));
  }, py::arg("status"), py::arg("stream") = 0,
     "The KernelStatus at device address `status` as (code, request, value, limit).");
  m.def("read_int64", [](uintptr_t ptr, uintptr_t stream) {
    require(ptr, "read_int64", "ptr");
    return fetch_int64(ptr, stream, "read_int64");
  }, py::arg("ptr"), py::arg("stream") = 0, "The int64 at device address `ptr`.");

  bind_blocks(m);
  bind_draft(m);
  bind_ipc(m);
  bind_update(m);
  bind_packing(m);
  bind_sampling(m);
  bind_verify(m);
  bind_ngram(m);
}
