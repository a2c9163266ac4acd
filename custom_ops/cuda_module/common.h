// Shared helpers of the fd_mtp_cuda binding files (custom_ops/cuda_module/*.cc):
// device-address conversion, stream synchronisation, error and status checks.
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <mutex>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "../cuda/launchers.h"
#include "../cuda/stream_status.h"

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

// The id of op `name` in a stream's pending record (generated: cuda_launchers_gen.cc, the order
// of the module's STREAM_OPS).
int32_t stream_op_id(const char* name);

// The persistent StreamStatus of `stream` (docs/gpu_errors.md): allocated and zeroed on the
// stream's first op, then reused by every op on it for the life of the process (one small
// allocation per stream, none per call).
inline StreamStatus* stream_status_for(uintptr_t stream, const char* op) {
  static std::mutex mutex;
  static std::unordered_map<uintptr_t, StreamStatus*> records;
  std::lock_guard<std::mutex> lock(mutex);
  auto it = records.find(stream);
  if (it != records.end()) return it->second;
  void* mem = nullptr;
  throw_if(cudaMalloc(&mem, sizeof(StreamStatus)), op);
  throw_if(cudaMemsetAsync(mem, 0, sizeof(StreamStatus), as_stream(stream)), op);
  auto* s = static_cast<StreamStatus*>(mem);
  records.emplace(stream, s);
  return s;
}

// The stream's record on the host (synchronises the stream first).
inline StreamStatus fetch_stream_status(const StreamStatus* s, uintptr_t stream, const char* op) {
  sync(stream, op);
  StreamStatus host{};
  throw_if(cudaMemcpy(&host, s, sizeof(host), cudaMemcpyDeviceToHost), op);
  return host;
}

// Whether the hand-written bindings defer their status (fd_mtp.cuda's error mode is not
// "checked"; set by fd_mtp.cuda before each call through `set_deferred`). One flag per process:
// the mode is fd_mtp.cuda's, a process-wide setting.
inline bool& deferred_flag() {
  static bool deferred = false;
  return deferred;
}

// The end of a hand-written binding without a status: synchronises only in checked mode.
inline void finish(uintptr_t stream, const char* op) {
  if (!deferred_flag()) sync(stream, op);
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
