// Framework-free POSIX shared-memory helpers of the KV-cache sharing ops
// (spec §7: set_data_ipc / share_external_data / unset_data_ipc), used by the
// Paddle binding (ipc.cc) and the raw CUDA module
// (custom_ops/cuda_module/ipc.cc). Host code only; no paddle, no CUDA.
//
// A publication is one POSIX shared-memory segment `shm_name` holding a
// `Header`. Its first 72 bytes are FastDeploy's `shmStruct`
// ({size_t nprocesses; cudaIpcMemHandle_t memHandle}), so FastDeploy's
// share_external_data can read a GPU publication of ours and we can read one
// of FastDeploy's (a 72-byte segment: "legacy", no extension). The extension
// after it says what was published:
//   kind kCpu:  the tensor lives in POSIX shared-memory segment `backing`
//               (allocated by fd_mtp.ops.shared_empty), at byte `offset`;
//   kind kCuda: the tensor lives in the CUDA allocation of `cuda_handle`, at
//               byte `offset` from the allocation's base (cudaIpcOpenMemHandle
//               returns the base; FastDeploy assumes offset 0).
// Functions return false and set *err (a sentence fragment) on failure; they
// never throw and never exit.
#pragma once

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

namespace fd_mtp {
namespace ipc {

constexpr size_t kMaxNameLen = 255;  // NAME_MAX, counting the leading '/'
constexpr int kMaxRank = 8;
constexpr size_t kUpstreamBytes = 72;               // sizeof(FastDeploy's shmStruct)
constexpr uint64_t kMagic = 0x3143504950544d46ull;  // "FMTPIPC1" little-endian
// Names of backing segments created by shared_empty without a name start
// with this prefix; set_data_ipc refuses to publish under it.
constexpr const char* kBackingPrefix = "/fd_mtp.";
constexpr mode_t kMode = 0600;  // owner only (FastDeploy: 0777)

enum Kind : uint32_t { kCpu = 1, kCuda = 2 };

struct Header {
  // FastDeploy's shmStruct.
  uint64_t nprocesses;            // unused, 0
  unsigned char cuda_handle[64];  // cudaIpcMemHandle_t (kCuda)
  // fd_mtp extension.
  uint64_t magic;   // kMagic
  uint32_t kind;    // Kind
  int32_t device;   // CUDA device of the producer (kCuda), -1 on CPU
  uint64_t offset;  // bytes from the base of the backing memory
  uint64_t nbytes;  // bytes of the published tensor
  int32_t rank;     // shape of the published tensor (informational)
  int32_t elem_size;
  int64_t shape[kMaxRank];
  char dtype[16];                 // e.g. "float32" (informational)
  char backing[kMaxNameLen + 1];  // kCpu: name of the backing segment
};
static_assert(offsetof(Header, magic) == kUpstreamBytes,
              "Header must start with FastDeploy's shmStruct");

inline std::string quoted(const std::string& name) { return "'" + name + "'"; }

inline std::string errno_text(int e) { return std::string(std::strerror(e)); }

// "" when `name` is a valid POSIX shared-memory name, else why not.
inline std::string name_problem(const std::string& name) {
  if (name.empty()) return "is empty; use a name such as '/kv_cache_0'";
  if (name.size() > kMaxNameLen)
    return quoted(name.substr(0, 40) + "...") + " is " + std::to_string(name.size()) +
           " characters long; the limit is " + std::to_string(kMaxNameLen);
  if (name.find('\0') != std::string::npos) return "contains a NUL character";
  if (name[0] != '/') return quoted(name) + " must start with '/' (e.g. '/" + name + "')";
  if (name.size() == 1) return "'/' needs at least one character after the '/'";
  if (name.find('/', 1) != std::string::npos)
    return quoted(name) + " must not contain a '/' after the leading one";
  return "";
}

inline bool starts_with(const std::string& s, const char* prefix) {
  return s.compare(0, std::strlen(prefix), prefix) == 0;
}

// Size in bytes of the segment open as `fd` (-1 on error).
inline int64_t segment_size(int fd) {
  struct stat st;
  if (fstat(fd, &st) != 0) return -1;
  return static_cast<int64_t>(st.st_size);
}

// Creates segment `name` of `size` bytes, zero-filled. exclusive: fail when
// it exists; else an existing segment is truncated to 0 first (so it is
// zeroed, like FastDeploy's memset). Returns the fd, or -1 and *err.
inline int create_segment(const std::string& name, size_t size, bool exclusive, std::string* err) {
  const int flags = O_RDWR | O_CREAT | (exclusive ? O_EXCL : 0);
  const int fd = shm_open(name.c_str(), flags, kMode);
  if (fd < 0) {
    const int e = errno;
    *err = e == EEXIST ? "already exists (" + quoted("/dev/shm" + name) + ")"
                       : "cannot be created: " + errno_text(e);
    return -1;
  }
  if ((!exclusive && ftruncate(fd, 0) != 0) || ftruncate(fd, static_cast<off_t>(size)) != 0) {
    *err = "cannot be sized to " + std::to_string(size) + " bytes: " + errno_text(errno);
    close(fd);
    if (exclusive) shm_unlink(name.c_str());
    return -1;
  }
  return fd;
}

// Maps `size` bytes of `fd` shared read-write. Returns nullptr and *err.
inline void* map_fd(int fd, size_t size, std::string* err) {
  void* p = mmap(nullptr, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  if (p == MAP_FAILED) {
    *err = "cannot be mapped (" + std::to_string(size) + " bytes): " + errno_text(errno);
    return nullptr;
  }
  return p;
}

// Writes `h` to segment `name` (created, or replaced if it exists).
inline bool write_header(const std::string& name, const Header& h, std::string* err) {
  const int fd = create_segment(name, sizeof(Header), /*exclusive=*/false, err);
  if (fd < 0) return false;
  void* p = map_fd(fd, sizeof(Header), err);
  close(fd);
  if (p == nullptr) return false;
  std::memcpy(p, &h, sizeof(Header));
  munmap(p, sizeof(Header));
  return true;
}

// Reads the publication `name`. *extended is false for a FastDeploy segment
// (only the 72-byte shmStruct: a CUDA handle, offset 0, size unknown).
inline bool read_header(const std::string& name, Header* h, bool* extended, std::string* err) {
  const int fd = shm_open(name.c_str(), O_RDONLY, 0);
  if (fd < 0) {
    const int e = errno;
    *err = e == ENOENT ? "names no shared-memory segment (nothing is published under it: "
                         "publish with set_data_ipc first; unset_data_ipc(..., unlink_shm=True) "
                         "and the publisher's exit remove it)"
                       : "cannot be opened: " + errno_text(e);
    return false;
  }
  const int64_t size = segment_size(fd);
  if (size < static_cast<int64_t>(kUpstreamBytes)) {
    close(fd);
    *err = "is a shared-memory segment of " + std::to_string(size) +
           " bytes, not a publication of set_data_ipc (at least " + std::to_string(kUpstreamBytes) +
           " bytes)";
    return false;
  }
  const size_t len =
      size < static_cast<int64_t>(sizeof(Header)) ? static_cast<size_t>(size) : sizeof(Header);
  void* p = mmap(nullptr, len, PROT_READ, MAP_SHARED, fd, 0);
  close(fd);
  if (p == MAP_FAILED) {
    *err = "cannot be mapped: " + errno_text(errno);
    return false;
  }
  std::memset(h, 0, sizeof(Header));
  std::memcpy(h, p, len);
  munmap(p, len);
  *extended = len == sizeof(Header) && h->magic == kMagic;
  if (!*extended && size != static_cast<int64_t>(kUpstreamBytes)) {
    *err = "is a shared-memory segment of " + std::to_string(size) +
           " bytes that set_data_ipc did not write (no fd_mtp header, and not FastDeploy's " +
           std::to_string(kUpstreamBytes) + "-byte CUDA IPC record)";
    return false;
  }
  if (*extended) h->backing[kMaxNameLen] = '\0';
  return true;
}

// Removes the name `name` (memory stays while mapped anywhere).
inline bool unlink_segment(const std::string& name, std::string* err) {
  if (shm_unlink(name.c_str()) == 0) return true;
  const int e = errno;
  *err = e == ENOENT ? "names no shared-memory segment (already unlinked, or never published)"
                     : "cannot be unlinked: " + errno_text(e);
  return false;
}

// Maps the whole of segment `name` read-write. Returns nullptr and *err.
inline void* map_segment(const std::string& name, size_t* size, std::string* err) {
  const int fd = shm_open(name.c_str(), O_RDWR, 0);
  if (fd < 0) {
    *err = errno == ENOENT ? "does not exist" : "cannot be opened: " + errno_text(errno);
    return nullptr;
  }
  const int64_t s = segment_size(fd);
  if (s <= 0) {
    close(fd);
    *err = "is empty";
    return nullptr;
  }
  *size = static_cast<size_t>(s);
  void* p = map_fd(fd, *size, err);
  close(fd);
  return p;
}

// A publication header for a tensor of `shape` (rank <= kMaxRank).
inline Header make_header(Kind kind, int device, uint64_t offset, uint64_t nbytes,
                          const std::vector<int64_t>& shape, int elem_size,
                          const std::string& dtype) {
  Header h;
  std::memset(&h, 0, sizeof(h));
  h.magic = kMagic;
  h.kind = kind;
  h.device = device;
  h.offset = offset;
  h.nbytes = nbytes;
  h.rank = static_cast<int32_t>(shape.size());
  h.elem_size = elem_size;
  for (size_t i = 0; i < shape.size() && i < static_cast<size_t>(kMaxRank); ++i)
    h.shape[i] = shape[i];
  std::strncpy(h.dtype, dtype.c_str(), sizeof(h.dtype) - 1);
  return h;
}

inline std::string shape_text(const int64_t* shape, int rank) {
  std::string s = "[";
  for (int i = 0; i < rank; ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Bytes of a tensor of `shape` with elements of `elem_size` bytes; -1 when a
// dimension is negative or the product overflows.
inline int64_t shape_bytes(const std::vector<int64_t>& shape, int64_t elem_size) {
  int64_t n = elem_size;
  for (int64_t d : shape) {
    if (d < 0) return -1;
    if (d != 0 && n > INT64_MAX / d) return -1;
    n *= d;
  }
  return n;
}

}  // namespace ipc
}  // namespace fd_mtp
