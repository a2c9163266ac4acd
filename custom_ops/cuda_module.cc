// fd_mtp_cuda: the CUDA launchers on raw device pointers, for testing the CUDA
// kernels with CuPy where Paddle-GPU is absent. Framework-free (no paddle).
//
// Each op's parameter struct is exposed as a Python class whose pointer fields
// take integer device addresses (CuPy: `array.data.ptr`) and whose size fields
// take ints; `fd_mtp.cuda` fills them from arrays. A launcher call returns the
// kernel status as a tuple (code, request, value, limit), code 0 meaning fine,
// and raises RuntimeError on a CUDA error. Calls synchronise the stream.
#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "cuda/launchers.h"

namespace py = pybind11;
using namespace fd_mtp;

namespace {

void throw_if(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

void sync(uintptr_t stream, const char* op) {
  throw_if(cudaStreamSynchronize(as_stream(stream)), op);
}

// Binds `Struct::field` (a pointer) as an integer address property.
template <typename Struct, typename T>
void pointer_field(py::class_<Struct>& cls, const char* name, T* Struct::*field) {
  cls.def_property(
      name,
      [field](const Struct& s) { return reinterpret_cast<uintptr_t>(s.*field); },
      [field](Struct& s, uintptr_t v) { s.*field = reinterpret_cast<T*>(v); });
}

}  // namespace

PYBIND11_MODULE(fd_mtp_cuda, m) {
  m.doc() = "fd_mtp CUDA launchers on raw device pointers (see fd_mtp.cuda)";

  {
    using P = DraftModelPostprocessParams;
    py::class_<P> c(m, "DraftModelPostprocessParams");
    c.def(py::init([]() { return P{}; }));
    pointer_field(c, "base_model_draft_tokens", &P::base_model_draft_tokens);
    pointer_field(c, "base_model_seq_lens_this_time", &P::base_model_seq_lens_this_time);
    pointer_field(c, "base_model_seq_lens_encoder", &P::base_model_seq_lens_encoder);
    pointer_field(c, "base_model_stop_flags", &P::base_model_stop_flags);
    c.def_readwrite("draft_cols", &P::draft_cols);
    c.def_readwrite("bsz", &P::bsz);
    m.def("draft_model_postprocess", [](const P& p, uintptr_t stream) {
      throw_if(draft_model_postprocess_cuda(p, as_stream(stream)), "draft_model_postprocess");
      sync(stream, "draft_model_postprocess");
    }, py::arg("params"), py::arg("stream") = 0);
  }
}
