// Shared helpers of the fd_mtp_cuda binding files (custom_ops/cuda_module/*.cc):
// device-address conversion, stream synchronisation, error and status checks.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <stdexcept>
#include <string>

#include "../cuda/launchers.h"

namespace fd_mtp {
namespace pybind {

namespace py = pybind11;

inline void throw_if(cudaError_t err, const char* what) {
  if (err != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(err));
}

inline cudaStream_t as_stream(uintptr_t s) { return reinterpret_cast<cudaStream_t>(s); }

inline void sync(uintptr_t stream, const char* op) {
  throw_if(cudaStreamSynchronize(as_stream(stream)), op);
}

template <typename T>
T* as_ptr(uintptr_t v) {
  return reinterpret_cast<T*>(v);
}

// A null device address is always a caller bug here: refuse it before launch.
inline void require(uintptr_t v, const char* op, const char* what) {
  if (v == 0) throw std::invalid_argument(std::string(op) + ": " + what + " is a null address");
}

inline py::tuple status_tuple(const KernelStatus& s) {
  return py::make_tuple(s.code, s.request, s.value, s.limit);
}

// Copies a KernelStatus from device memory (synchronises the stream first).
inline KernelStatus fetch_status(uintptr_t status, uintptr_t stream, const char* op) {
  sync(stream, op);
  KernelStatus s{};
  throw_if(cudaMemcpy(&s, as_ptr<KernelStatus>(status), sizeof(s), cudaMemcpyDeviceToHost), op);
  return s;
}

inline int64_t fetch_int64(uintptr_t ptr, uintptr_t stream, const char* op) {
  sync(stream, op);
  int64_t v = 0;
  throw_if(cudaMemcpy(&v, as_ptr<int64_t>(ptr), sizeof(v), cudaMemcpyDeviceToHost), op);
  return v;
}

// Binds `Struct::field` (a pointer) as an integer address property.
template <typename Struct, typename T>
void pointer_field(py::class_<Struct>& cls, const char* name, T* Struct::* field) {
  cls.def_property(
      name, [field](const Struct& s) { return reinterpret_cast<uintptr_t>(s.*field); },
      [field](Struct& s, uintptr_t v) { s.*field = reinterpret_cast<T*>(v); });
}

}  // namespace pybind
}  // namespace fd_mtp
