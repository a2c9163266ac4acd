// Framework-free helpers shared by every kernel header: the host/device
// marker and the status record a kernel uses to report bad input.
//
// Kernels never abort and never write out of bounds: a per-request `check`
// function validates a request before anything is written and reports the
// first problem through KernelStatus; the binding turns it into a Python
// exception that names the argument.
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define FD_HOST_DEVICE __host__ __device__
#define FD_DEVICE __device__
#else
#define FD_HOST_DEVICE
#define FD_DEVICE
#endif

namespace fd_mtp {

// The first problem found in a batch. `code` 0 means "no problem"; other
// codes are defined per op (see the op's header, which also maps a code to
// the argument it concerns).
struct KernelStatus {
  int32_t code;
  int32_t request;  // batch index of the offending request (-1: not per request)
  int64_t value;    // the offending value
  int64_t limit;    // the bound it violated
};

// Records a problem unless one was recorded before (first writer wins; on
// the GPU the winner is the first to reach the atomic, which is enough: the
// caller only needs one concrete example to name).
FD_HOST_DEVICE inline void report(KernelStatus* status, int32_t code, int32_t request,
                                  int64_t value, int64_t limit) {
#if defined(__CUDA_ARCH__)
  if (atomicCAS(&status->code, 0, code) == 0) {
    status->request = request;
    status->value = value;
    status->limit = limit;
  }
#else
  if (status->code == 0) {
    status->code = code;
    status->request = request;
    status->value = value;
    status->limit = limit;
  }
#endif
}

// True when 0 <= index < size.
FD_HOST_DEVICE inline bool in_range(int64_t index, int64_t size) {
  return index >= 0 && index < size;
}

// How a status code is explained to the user: the argument it concerns and a
// sentence fragment describing `value` and `limit`.
struct StatusInfo {
  int32_t code;
  const char* argument;
  const char* what;  // e.g. "writes column {value} but the row has {limit} columns"
};

}  // namespace fd_mtp
