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
  int32_t lock;     // device only: the spin lock of `report` (0 when free)
  int32_t op;       // the op that reported it, in a stream's pending record (docs/gpu_errors.md)
};

// A code no op uses: the launch was skipped because an earlier op on the same
// stream reported bad input (the stream is "poisoned", custom_ops/cuda/stream_status.h).
constexpr int32_t kStatusPoisoned = -1;

// Records a problem. On the CPU the first report wins (requests are checked
// in index order). On the GPU the requests are checked in parallel, so the
// report of the lowest request index wins, which names the same request as
// the CPU does; a report that is not per request (-1) is kept when it came
// first and never replaces one (those checks run serially, before or after
// the per-request ones, as on the CPU). A poisoned status is never replaced.
FD_HOST_DEVICE inline void report(KernelStatus* status, int32_t code, int32_t request,
                                  int64_t value, int64_t limit) {
#if defined(__CUDA_ARCH__)
  while (atomicCAS(&status->lock, 0, 1) != 0) {
  }
  __threadfence();
  volatile KernelStatus* v = status;
  const int32_t old = v->code;
  if (old == 0 ||
      (old != kStatusPoisoned && request >= 0 && v->request >= 0 && request < v->request)) {
    v->code = code;
    v->request = request;
    v->value = value;
    v->limit = limit;
  }
  __threadfence();
  atomicExch(&status->lock, 0);
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
