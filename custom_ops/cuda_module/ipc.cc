// fd_mtp_cuda bindings of the KV-cache sharing ops (spec §7): CUDA IPC handles
// stored in POSIX shared memory, in the layout of custom_ops/kernels/ipc.h
// (the Paddle binding writes and reads the same segments). fd_mtp/cuda/ipc.py
// builds set_data_ipc / share_external_data / unset_data_ipc on CuPy arrays
// from these. Bad names and missing segments raise ValueError; CUDA errors
// raise RuntimeError.
#include <string>
#include <vector>

#include <pybind11/stl.h>

#include "common.h"
#include "../kernels/ipc.h"

namespace fd_mtp {
namespace pybind {
namespace {

[[noreturn]] void bad(const std::string& op, const std::string& arg, const std::string& what) {
  throw std::invalid_argument(op + ": " + arg + " " + what);
}

void check_name(const char* op, const std::string& name) {
  const std::string problem = ipc::name_problem(name);
  if (!problem.empty())
    bad(op, "shm_name",
        problem + " (a POSIX shared-memory name: a leading '/', no other '/', at most " +
            std::to_string(ipc::kMaxNameLen) + " characters)");
}

// Runs `fn` with `device` current, restoring the previous device.
template <typename Fn>
cudaError_t on_device(int device, Fn fn) {
  int previous = 0;
  cudaError_t err = cudaGetDevice(&previous);
  if (err != cudaSuccess) return err;
  err = cudaSetDevice(device);
  if (err != cudaSuccess) return err;
  err = fn();
  cudaSetDevice(previous);
  return err;
}

// One opened CUDA IPC handle; closes it when destroyed (or on close()).
class IpcMemory {
 public:
  IpcMemory(const py::bytes& handle, int device) : device_(device) {
    const std::string h = handle;
    if (h.size() != kCudaIpcHandleBytes)
      bad("IpcMemory", "handle", "must be " + std::to_string(kCudaIpcHandleBytes) + " bytes");
    handle_ = h;
    throw_if(on_device(device,
                       [&] {
                         return cuda_ipc_open(reinterpret_cast<const unsigned char*>(h.data()),
                                              &base_, &size_);
                       }),
             "share_external_data: cudaIpcOpenMemHandle (the producer must be alive and its tensor "
             "not freed)");
  }
  ~IpcMemory() {
    if (base_ != nullptr) {
      on_device(device_, [&] { return cuda_ipc_close(base_); });
      cudaGetLastError();
    }
  }
  IpcMemory(const IpcMemory&) = delete;
  IpcMemory& operator=(const IpcMemory&) = delete;

  void close() {
    if (base_ == nullptr) bad("unset_data_ipc", "tensor", "is already closed");
    void* b = base_;
    base_ = nullptr;
    throw_if(on_device(device_, [&] { return cuda_ipc_close(b); }),
             "unset_data_ipc: cudaIpcCloseMemHandle");
  }
  uintptr_t ptr() const { return reinterpret_cast<uintptr_t>(base_); }
  uint64_t size() const { return size_; }
  int device() const { return device_; }
  bool closed() const { return base_ == nullptr; }
  py::bytes handle() const { return py::bytes(handle_); }

 private:
  void* base_ = nullptr;
  uint64_t size_ = 0;
  int device_;
  std::string handle_;
};

}  // namespace

void bind_ipc(py::module_& m) {
  m.attr("IPC_MAX_RANK") = py::int_(ipc::kMaxRank);
  m.attr("IPC_MAX_NAME_LEN") = py::int_(ipc::kMaxNameLen);
  m.attr("IPC_BACKING_PREFIX") = py::str(ipc::kBackingPrefix);

  m.def(
      "ipc_name_problem", [](const std::string& name) { return ipc::name_problem(name); },
      py::arg("name"), "'' when `name` is a valid POSIX shared-memory name, else why not.");

  m.def(
      "ipc_publish_cuda",
      [](uintptr_t ptr, uint64_t nbytes, const std::string& shm_name, int device,
         const std::vector<int64_t>& shape, int elem_size, const std::string& dtype) {
        constexpr const char* op = "set_data_ipc";
        check_name(op, shm_name);
        require(ptr, op, "tensor");
        if (shape.size() > static_cast<size_t>(ipc::kMaxRank))
          bad(op, "tensor", "must have rank <= " + std::to_string(ipc::kMaxRank));
        ipc::Header h = ipc::make_header(ipc::kCuda, device, 0, nbytes, shape, elem_size, dtype);
        uint64_t alloc_bytes = 0;
        throw_if(on_device(device,
                           [&] {
                             return cuda_ipc_export(as_ptr<void>(ptr), h.cuda_handle, &h.offset,
                                                    &alloc_bytes);
                           }),
                 "set_data_ipc: exporting tensor through CUDA IPC");
        std::string err;
        if (!ipc::write_header(shm_name, h, &err))
          bad(op, "shm_name", ipc::quoted(shm_name) + " " + err);
        return py::make_tuple(h.offset, alloc_bytes);
      },
      py::arg("ptr"), py::arg("nbytes"), py::arg("shm_name"), py::arg("device"), py::arg("shape"),
      py::arg("elem_size"), py::arg("dtype"),
      "Writes the CUDA IPC record of the tensor at device address `ptr` to segment `shm_name`; "
      "returns (offset from its allocation's base, allocation bytes).");

  m.def(
      "ipc_read",
      [](const std::string& shm_name) {
        constexpr const char* op = "share_external_data";
        check_name(op, shm_name);
        ipc::Header h;
        bool extended = false;
        std::string err;
        if (!ipc::read_header(shm_name, &h, &extended, &err))
          bad(op, "shm_name", ipc::quoted(shm_name) + " " + err);
        py::dict d;
        d["extended"] = extended;
        d["kind"] = extended ? (h.kind == ipc::kCpu    ? "cpu"
                                : h.kind == ipc::kCuda ? "cuda"
                                                       : "unknown")
                             : "cuda";
        d["handle"] =
            py::bytes(reinterpret_cast<const char*>(h.cuda_handle), sizeof(h.cuda_handle));
        d["device"] = extended ? h.device : -1;
        d["offset"] = extended ? h.offset : 0;
        d["nbytes"] = extended ? py::object(py::int_(h.nbytes)) : py::object(py::none());
        std::vector<int64_t> shape;
        if (extended)
          for (int i = 0; i < h.rank && i < ipc::kMaxRank; ++i) shape.push_back(h.shape[i]);
        d["shape"] = shape;
        d["dtype"] = extended ? std::string(h.dtype) : std::string();
        d["backing"] = extended ? std::string(h.backing) : std::string();
        return d;
      },
      py::arg("shm_name"),
      "The publication in segment `shm_name` as a dict (kind, handle, device, offset, nbytes, "
      "shape, dtype, backing, extended: False for FastDeploy's bare 72-byte record).");

  m.def(
      "ipc_unlink",
      [](const std::string& shm_name) {
        check_name("unset_data_ipc", shm_name);
        std::string err;
        if (!ipc::unlink_segment(shm_name, &err))
          bad("unset_data_ipc", "shm_name", ipc::quoted(shm_name) + " " + err);
      },
      py::arg("shm_name"), "shm_unlink(shm_name); ValueError when it does not exist.");

  py::class_<IpcMemory>(m, "IpcMemory",
                        "An opened CUDA IPC handle (cudaIpcOpenMemHandle with "
                        "cudaIpcMemLazyEnablePeerAccess); closed on close() or destruction.")
      .def(py::init<const py::bytes&, int>(), py::arg("handle"), py::arg("device"))
      .def("close", &IpcMemory::close)
      .def_property_readonly("ptr", &IpcMemory::ptr, "The allocation's base in this process.")
      .def_property_readonly("size", &IpcMemory::size, "The allocation's bytes (0: unknown).")
      .def_property_readonly("device", &IpcMemory::device)
      .def_property_readonly("closed", &IpcMemory::closed)
      .def_property_readonly("handle", &IpcMemory::handle);
}

}  // namespace pybind
}  // namespace fd_mtp
