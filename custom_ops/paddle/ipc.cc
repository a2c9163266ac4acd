// KV-cache sharing between processes (spec §7). Arguments, checks and
// registration: fd_mtp/schema/ipc.py (generated into <op>.gen.h); here the
// apply() of each op:
//   fd_mtp_shared_empty         a CPU tensor whose memory is a POSIX shared-memory segment
//   fd_mtp_set_data_ipc         publish a tensor under a shared-memory name
//   fd_mtp_share_external_data  attach to a published tensor (no copy)
//   fd_mtp_unset_data_ipc       close an attachment / remove a publication
// Publication format and CUDA IPC details: custom_ops/kernels/ipc.h and
// custom_ops/cuda/ipc.cu. Lifetime rules: fd_mtp/schema/ipc.py.
//
// Every tensor made here (shared_empty's, share_external_data's) is a
// paddle::from_blob over memory recorded in a process-local table of
// mappings; its deleter releases the mapping when paddle frees the tensor
// (CPU: munmap, plus shm_unlink of the backing name for shared_empty's own
// segment; GPU: cudaIpcCloseMemHandle). At process exit (C++ static
// destruction, i.e. a normal interpreter exit) the names this process created
// are unlinked: its backing segments and its publications.
#include <sys/types.h>
#include <unistd.h>

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "../kernels/ipc.h"
#include "set_data_ipc.gen.h"
#include "share_external_data.gen.h"
#include "shared_empty.gen.h"
#include "unset_data_ipc.gen.h"

namespace {
using paddle::DataType;
namespace ipc = fd_mtp::ipc;
using fd_mtp::check::fail;
using fd_mtp::check::shape_str;

enum class Source { kAllocated, kAttachedCpu, kAttachedCuda };

struct Mapping {
  Source source;
  char* base = nullptr;   // CPU: mmap address; CUDA: cudaIpcOpenMemHandle's base
  size_t size = 0;        // bytes mapped (CUDA: allocation size, 0 when unknown)
  std::string backing;    // CPU: name of the backing segment
  std::string handle;     // CUDA: the IPC handle's bytes (opened once per process)
  pid_t pid = 0;          // creator (a fork child inherits the table but owns nothing)
  int refs = 1;           // live tensors over it
  bool closed = false;    // unset_data_ipc(close_ipc=True) released it early
  bool unlinked = false;  // backing name already removed
};

// Process-local table of shared mappings and of this process's publications.
// Heap-allocated and never destroyed: paddle may free tensors (running our
// deleters) after static destructors ran.
struct Registry {
  std::recursive_mutex mu;
  std::map<uint64_t, Mapping> maps;        // by id (captured by the deleter)
  std::map<std::string, pid_t> published;  // header segments written by set_data_ipc
  uint64_t next_id = 1;
  uint64_t next_name = 0;

  // The mapping holding [p, p + n), or nullptr.
  std::pair<const uint64_t, Mapping>* find(const void* p, size_t n) {
    const char* c = static_cast<const char*>(p);
    for (auto& kv : maps) {
      const Mapping& m = kv.second;
      if (m.closed || c < m.base) continue;
      const size_t end = m.size ? m.size : 1;
      if (static_cast<size_t>(c - m.base) < end && static_cast<size_t>(c - m.base) + n <= end)
        return &kv;
      if (!m.size && c == m.base) return &kv;  // CUDA mapping of unknown size
    }
    return nullptr;
  }
  bool is_live_backing(const std::string& name) {
    for (const auto& kv : maps)
      if (kv.second.source == Source::kAllocated && !kv.second.unlinked &&
          kv.second.backing == name)
        return true;
    return false;
  }
};

Registry& registry() {
  static Registry* r = new Registry();
  return *r;
}

// Unlinks, at a normal process exit, every name this process created.
struct ExitCleanup {
  ~ExitCleanup() {
    Registry& r = registry();
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    const pid_t me = getpid();
    for (auto& kv : r.maps) {
      Mapping& m = kv.second;
      if (m.source == Source::kAllocated && m.pid == me && !m.unlinked) {
        shm_unlink(m.backing.c_str());
        m.unlinked = true;
      }
    }
    for (const auto& kv : r.published)
      if (kv.second == me) shm_unlink(kv.first.c_str());
    r.published.clear();
  }
} exit_cleanup;

void close_cuda(char* base) {
#ifdef PADDLE_WITH_CUDA
  fd_mtp::cuda_ipc_close(base);
  cudaGetLastError();
#endif
}

// The deleter of every tensor made here.
void release(uint64_t id) {
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  auto it = r.maps.find(id);
  if (it == r.maps.end()) return;
  Mapping& m = it->second;
  if (--m.refs > 0) return;
  if (m.source == Source::kAttachedCuda) {
    if (!m.closed && m.pid == getpid()) close_cuda(m.base);
  } else {
    munmap(m.base, m.size);
    if (m.source == Source::kAllocated && m.pid == getpid() && !m.unlinked)
      shm_unlink(m.backing.c_str());
  }
  r.maps.erase(it);
}

paddle::Tensor wrap(void* data, const std::vector<int64_t>& shape, DataType dtype,
                    const phi::Place& place, uint64_t id) {
  return paddle::from_blob(data, shape, dtype, phi::DataLayout::NCHW, place,
                           [id](void*) { release(id); });
}

void check_name(const char* op, const char* arg, const std::string& name) {
  const std::string problem = ipc::name_problem(name);
  if (!problem.empty())
    fail(op, arg, problem, " (a POSIX shared-memory name: a leading '/', no other '/', at most ",
         ipc::kMaxNameLen, " characters)");
}

int64_t checked_bytes(const char* op, const std::vector<int64_t>& shape, DataType dtype) {
  const int64_t bytes = ipc::shape_bytes(shape, static_cast<int64_t>(phi::SizeOf(dtype)));
  if (bytes < 0)
    fail(op, "shape", "must have non-negative dimensions whose product fits int64, got ",
         shape_str(shape));
  return bytes;
}

std::string dtype_name(DataType d) { return phi::DataTypeToString(d); }

// Bytes of physical memory of this machine (0 when unknown).
int64_t physical_memory_bytes() {
  const long pages = sysconf(_SC_PHYS_PAGES);
  const long page = sysconf(_SC_PAGESIZE);
  if (pages <= 0 || page <= 0) return 0;
  if (pages > INT64_MAX / page) return INT64_MAX;
  return static_cast<int64_t>(pages) * page;
}

}  // namespace

// ------------------------------------------------------------ shared_empty ---
constexpr const char* kEmpty = "shared_empty";

// dtype: any shape, the new tensor's dtype, CPU, read (supplies the dtype only;
//        checked by the schema)
// out:   `shape`, that dtype, CPU, new; its memory is segment `name`
//        (generated "/fd_mtp.<pid>.<n>" when empty), zero-filled
std::vector<paddle::Tensor> shared_empty_apply(SharedEmptyArgs& a) {
  const std::vector<int64_t>& shape = a.shape;
  const std::string& name = a.name;
  const DataType dtype = a.dtype.dtype();
  const int64_t bytes = checked_bytes(kEmpty, shape, dtype);
  // tmpfs accepts a segment larger than the machine (pages are allocated on
  // first touch, and a touch that finds no memory kills the process with
  // SIGBUS): refuse what cannot fit in physical memory.
  const int64_t physical = physical_memory_bytes();
  if (physical > 0 && bytes > physical)
    fail(kEmpty, "shape", shape_str(shape), " with dtype ", dtype_name(dtype), " needs ", bytes,
         " bytes but this machine has ", physical, " bytes of physical memory");
  if (!name.empty()) check_name(kEmpty, "name", name);
  const size_t size = bytes > 0 ? static_cast<size_t>(bytes) : 1;  // mmap needs >= 1 byte

  Registry& r = registry();
  std::string seg = name, err;
  int fd = -1;
  if (!name.empty()) {
    fd = ipc::create_segment(seg, size, /*exclusive=*/true, &err);
    if (fd < 0) fail(kEmpty, "name", ipc::quoted(seg), " ", err);
  } else {
    for (int attempt = 0; fd < 0 && attempt < 1000; ++attempt) {
      uint64_t n;
      {
        std::lock_guard<std::recursive_mutex> lock(r.mu);
        n = r.next_name++;
      }
      seg = std::string(ipc::kBackingPrefix) + std::to_string(getpid()) + "." + std::to_string(n);
      fd = ipc::create_segment(seg, size, /*exclusive=*/true, &err);
      if (fd < 0 && err.compare(0, 14, "already exists") != 0) break;
    }
    if (fd < 0) fail(kEmpty, "out", "shared-memory segment ", ipc::quoted(seg), " ", err);
  }
  void* base = ipc::map_fd(fd, size, &err);
  close(fd);
  if (base == nullptr) {
    shm_unlink(seg.c_str());
    fail(kEmpty, "out", "shared-memory segment ", ipc::quoted(seg), " ", err);
  }
  uint64_t id;
  {
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    id = r.next_id++;
    Mapping m;
    m.source = Source::kAllocated;
    m.base = static_cast<char*>(base);
    m.size = size;
    m.backing = seg;
    m.pid = getpid();
    r.maps.emplace(id, m);
  }
  return {wrap(base, shape, dtype, phi::CPUPlace(), id)};
}

std::vector<std::vector<int64_t>> shared_empty_infer_shape(const std::vector<int64_t>&,
                                                           const std::vector<int64_t>& shape,
                                                           const std::string&) {
  return {shape};
}
std::vector<DataType> shared_empty_infer_dtype(const DataType& dtype) { return {dtype}; }

// ------------------------------------------------------------ set_data_ipc ---
constexpr const char* kSet = "set_data_ipc";

void publish(const std::string& shm_name, const ipc::Header& h) {
  std::string err;
  if (!ipc::write_header(shm_name, h, &err))
    fail(kSet, "shm_name", ipc::quoted(shm_name), " ", err);
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  r.published[shm_name] = getpid();
}

// tensor:   any shape (rank <= 8), any dtype, contiguous (checked by the
//           schema: a consumer sees the published bytes in row-major order),
//           CPU (memory from shared_empty or share_external_data) or GPU, read
//           (declared in place, as upstream)
// shm_name: the publication's name; an existing segment of that name is replaced
void set_data_ipc_apply(SetDataIpcArgs& a) {
  const paddle::Tensor& tensor = a.tensor;
  const std::string& shm_name = a.shm_name;
  check_name(kSet, "shm_name", shm_name);
  if (ipc::starts_with(shm_name, ipc::kBackingPrefix))
    fail(kSet, "shm_name", ipc::quoted(shm_name), " starts with ", ipc::quoted(ipc::kBackingPrefix),
         ", which is reserved for the backing segments of shared_empty");
  const auto& shape = tensor.shape();
  if (shape.size() > static_cast<size_t>(ipc::kMaxRank))
    fail(kSet, "tensor", "must have rank <= ", ipc::kMaxRank, ", got shape ", shape_str(shape));
  const uint64_t nbytes = static_cast<uint64_t>(tensor.numel()) * phi::SizeOf(tensor.dtype());
  const int elem = static_cast<int>(phi::SizeOf(tensor.dtype()));

  if (tensor.is_cpu()) {
    Registry& r = registry();
    ipc::Header h;
    {
      std::lock_guard<std::recursive_mutex> lock(r.mu);
      if (r.is_live_backing(shm_name))
        fail(kSet, "shm_name", ipc::quoted(shm_name),
             " is the backing segment of a shared_empty tensor; publish under another name");
      auto* hit = r.find(tensor.data(), nbytes);
      if (hit == nullptr || hit->second.source == Source::kAttachedCuda)
        fail(kSet, "tensor",
             "is a CPU tensor whose memory is not POSIX shared memory, so no other process can "
             "map it; allocate it with fd_mtp.ops.shared_empty(shape, dtype) or shared_zeros "
             "(or attach one with share_external_data) and publish that");
      const Mapping& m = hit->second;
      h = ipc::make_header(ipc::kCpu, -1,
                           static_cast<uint64_t>(static_cast<const char*>(tensor.data()) - m.base),
                           nbytes, shape, elem, dtype_name(tensor.dtype()));
      std::strncpy(h.backing, m.backing.c_str(), ipc::kMaxNameLen);
    }
    publish(shm_name, h);
    return;
  }
#ifdef PADDLE_WITH_CUDA
  if (tensor.is_gpu()) {
    const int device = tensor.place().GetDeviceId();
    int previous = 0;
    fd_mtp::check::cuda(kSet, cudaGetDevice(&previous));
    fd_mtp::check::cuda(kSet, cudaSetDevice(device));
    ipc::Header h =
        ipc::make_header(ipc::kCuda, device, 0, nbytes, shape, elem, dtype_name(tensor.dtype()));
    uint64_t alloc_bytes = 0;
    const cudaError_t err =
        fd_mtp::cuda_ipc_export(tensor.data(), h.cuda_handle, &h.offset, &alloc_bytes);
    cudaSetDevice(previous);
    if (err != cudaSuccess)
      fail(kSet, "tensor", "cannot be exported through CUDA IPC (", cudaGetErrorString(err), ")");
    publish(shm_name, h);
    return;
  }
#endif
  fd_mtp::check::unsupported_place(kSet, "tensor", tensor);
}

// ----------------------------------------------------- share_external_data ---
constexpr const char* kShare = "share_external_data";

paddle::Tensor attach_cpu(const paddle::Tensor& input, const std::string& shm_name,
                          const std::vector<int64_t>& shape, const ipc::Header& h, int64_t need) {
  const std::string backing = h.backing;
  std::string err;
  if (ipc::name_problem(backing) != "")
    fail(kShare, "shm_name", ipc::quoted(shm_name), " holds a corrupt header (backing name)");
  size_t size = 0;
  void* base = ipc::map_segment(backing, &size, &err);
  if (base == nullptr)
    fail(kShare, "shm_name", ipc::quoted(shm_name), " names a tensor whose memory, segment ",
         ipc::quoted(backing), ", ", err,
         err == "does not exist" ? " (its producer freed the tensor or exited)" : "");
  if (h.offset > size || h.nbytes > size - h.offset) {
    munmap(base, size);
    fail(kShare, "shm_name", ipc::quoted(shm_name), " publishes bytes [", h.offset, ", ",
         h.offset + h.nbytes, ") but its backing segment ", ipc::quoted(backing), " has ", size,
         " bytes");
  }
  Registry& r = registry();
  uint64_t id;
  {
    std::lock_guard<std::recursive_mutex> lock(r.mu);
    id = r.next_id++;
    Mapping m;
    m.source = Source::kAttachedCpu;
    m.base = static_cast<char*>(base);
    m.size = size;
    m.backing = backing;
    m.pid = getpid();
    r.maps.emplace(id, m);
  }
  return wrap(static_cast<char*>(base) + h.offset, shape, input.dtype(), phi::CPUPlace(), id);
}

#ifdef PADDLE_WITH_CUDA
paddle::Tensor attach_cuda(const paddle::Tensor& input, const std::string& shm_name,
                           const std::vector<int64_t>& shape, const ipc::Header& h, bool extended,
                           int64_t need) {
  const int device = input.place().GetDeviceId();
  const std::string handle(reinterpret_cast<const char*>(h.cuda_handle), sizeof(h.cuda_handle));
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  // A handle is opened once per process; later attachments share the mapping.
  for (auto& kv : r.maps) {
    Mapping& m = kv.second;
    if (m.source != Source::kAttachedCuda || m.closed || m.handle != handle) continue;
    if (m.size && (h.offset > m.size || static_cast<uint64_t>(need) > m.size - h.offset))
      fail(kShare, "shape", shape_str(shape), " needs ", need, " bytes but the allocation behind ",
           ipc::quoted(shm_name), " has ", m.size - h.offset, " bytes after the tensor's start");
    ++m.refs;
    const uint64_t id = kv.first;
    return paddle::from_blob(m.base + h.offset, shape, input.dtype(), phi::DataLayout::NCHW,
                             input.place(), [id](void*) { release(id); });
  }
  int previous = 0;
  fd_mtp::check::cuda(kShare, cudaGetDevice(&previous));
  fd_mtp::check::cuda(kShare, cudaSetDevice(device));
  void* base = nullptr;
  uint64_t alloc_bytes = 0;
  const cudaError_t err = fd_mtp::cuda_ipc_open(h.cuda_handle, &base, &alloc_bytes);
  cudaSetDevice(previous);
  if (err != cudaSuccess)
    fail(kShare, "shm_name", ipc::quoted(shm_name), ": cudaIpcOpenMemHandle failed (",
         cudaGetErrorString(err), "); the producer must be alive and its tensor not freed");
  if (alloc_bytes &&
      (h.offset > alloc_bytes || static_cast<uint64_t>(need) > alloc_bytes - h.offset)) {
    fd_mtp::cuda_ipc_close(base);
    fail(kShare, "shape", shape_str(shape), " needs ", need, " bytes but the allocation behind ",
         ipc::quoted(shm_name), " has ", alloc_bytes - h.offset, " bytes after the tensor's start");
  }
  const uint64_t id = r.next_id++;
  Mapping m;
  m.source = Source::kAttachedCuda;
  m.base = static_cast<char*>(base);
  m.size = alloc_bytes;
  m.handle = handle;
  m.pid = getpid();
  r.maps.emplace(id, m);
  return paddle::from_blob(static_cast<char*>(base) + h.offset, shape, input.dtype(),
                           phi::DataLayout::NCHW, input.place(), [id](void*) { release(id); });
}
#endif

// input:    any shape, the result's dtype, CPU or GPU, read (supplies dtype and device only)
// shm_name: a publication of set_data_ipc (or FastDeploy's set_data_ipc on a GPU)
// shape:    the result's shape; shape x dtype must fit the published tensor
// out:      `shape`, input's dtype, new, aliasing the published memory (no copy)
std::vector<paddle::Tensor> share_external_data_apply(ShareExternalDataArgs& a) {
  const paddle::Tensor& input = a.input;
  const std::string& shm_name = a.shm_name;
  const std::vector<int64_t>& shape = a.shape;
  check_name(kShare, "shm_name", shm_name);
  const int64_t need = checked_bytes(kShare, shape, input.dtype());
  ipc::Header h;
  bool extended = false;
  std::string err;
  if (!ipc::read_header(shm_name, &h, &extended, &err))
    fail(kShare, "shm_name", ipc::quoted(shm_name), " ", err);
  const bool cuda = !extended || h.kind == ipc::kCuda;
  if (extended && h.kind != ipc::kCpu && h.kind != ipc::kCuda)
    fail(kShare, "shm_name", ipc::quoted(shm_name), " holds an unknown publication kind ", h.kind);
  if (extended && static_cast<uint64_t>(need) > h.nbytes)
    fail(kShare, "shape", shape_str(shape), " with dtype ", dtype_name(input.dtype()), " needs ",
         need, " bytes but the tensor published under ", ipc::quoted(shm_name), " has ", h.nbytes,
         " bytes (", h.dtype, " ", ipc::shape_text(h.shape, h.rank), ")");
  if (input.is_cpu()) {
    if (cuda)
      fail(kShare, "input", "is a CPU tensor but ", ipc::quoted(shm_name),
           " publishes a GPU tensor (a CUDA IPC handle); pass a GPU input");
    return {attach_cpu(input, shm_name, shape, h, need)};
  }
#ifdef PADDLE_WITH_CUDA
  if (input.is_gpu()) {
    if (!cuda)
      fail(kShare, "input", "is a GPU tensor but ", ipc::quoted(shm_name),
           " publishes a CPU tensor (POSIX shared memory); pass a CPU input");
    if (!extended) h.offset = 0;  // FastDeploy's record: the allocation's start
    return {attach_cuda(input, shm_name, shape, h, extended, need)};
  }
#endif
  fd_mtp::check::unsupported_place(kShare, "input", input);
}

std::vector<std::vector<int64_t>> share_external_data_infer_shape(
    const std::vector<int64_t>&, const std::string&, const std::vector<int64_t>& shape) {
  return {shape};
}
std::vector<DataType> share_external_data_infer_dtype(const DataType& input) { return {input}; }

// ---------------------------------------------------------- unset_data_ipc ---
constexpr const char* kUnset = "unset_data_ipc";

// tensor:     any shape/dtype, CPU or GPU, read (declared in place, as upstream);
//             with close_ipc: a tensor from share_external_data
// shm_name:   with unlink_shm: the publication to remove
// close_ipc:  release tensor's attachment now (GPU: cudaIpcCloseMemHandle; CPU:
//             the shared pages are replaced by private zero pages, so the tensor
//             stays addressable but no longer shares memory)
// unlink_shm: shm_unlink(shm_name)
// Everything that can be refused is checked before anything changes: the
// name, the attachment, then the unlink (which fails, changing nothing, when
// the name does not exist); the attachment is closed last.
void unset_data_ipc_apply(UnsetDataIpcArgs& a) {
  const paddle::Tensor& tensor = a.tensor;
  const std::string& shm_name = a.shm_name;
  const bool close_ipc = a.close_ipc, unlink_shm = a.unlink_shm;
  if (unlink_shm) check_name(kUnset, "shm_name", shm_name);
  Registry& r = registry();
  std::lock_guard<std::recursive_mutex> lock(r.mu);
  Mapping* attachment = nullptr;
  if (close_ipc) {
    auto* hit = r.find(tensor.data(), 0);
    const bool attached = hit && hit->second.source != Source::kAllocated;
    if (!attached)
      fail(kUnset, "tensor",
           "was not attached with share_external_data (or is already closed); "
           "close_ipc=True closes an attachment, never a producer's own tensor");
    attachment = &hit->second;
  }
  if (unlink_shm) {
    if (r.is_live_backing(shm_name))
      fail(kUnset, "shm_name", ipc::quoted(shm_name),
           " is the backing segment of a shared_empty tensor, not a publication");
    std::string err;
    if (!ipc::unlink_segment(shm_name, &err))
      fail(kUnset, "shm_name", ipc::quoted(shm_name), " ", err);
    r.published.erase(shm_name);
  }
  if (attachment != nullptr) {
    Mapping& m = *attachment;
    if (m.source == Source::kAttachedCpu) {
      void* p = mmap(m.base, m.size, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
      if (p == MAP_FAILED)
        fail(kUnset, "tensor", "cannot be detached: ", ipc::errno_text(errno),
             unlink_shm ? " (shm_name was unlinked)" : "");
    } else {
#ifdef PADDLE_WITH_CUDA
      fd_mtp::check::cuda(kUnset, fd_mtp::cuda_ipc_close(m.base));
#endif
    }
    m.closed = true;
  }
}
