// The Paddle ops' GPU branch on the error model of the raw CUDA module (docs/gpu_errors.md): one
// persistent StreamStatus per CUDA stream (custom_ops/cuda/stream_status.h), persistent per-stream
// workspaces, and the error mode. No allocation and no synchronisation per op outside checked
// mode; the only host reads are the ones FastDeploy's contracts need (an op's CPU not_need_stop,
// a shape op's row count), and each raises the stream's pending error, by its op's name, first.
//
// The error mode and check_pending exist in every build (fd_mtp_ops_pybind binds them); the rest
// only where paddle is built with CUDA.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "check.h"

namespace fd_mtp {
namespace gpu {

// deferred (default): errors go to the stream's record; they raise at the next host read of the
// GPU branch or at check_pending. checked: every op synchronises and raises its own error.
// record: nothing raises by itself (graph capture); check_pending reads. Set by fd_mtp.ops
// (FD_MTP_CUDA_ERRORS, fd_mtp.ops.set_error_mode).
enum class ErrorMode { kDeferred, kChecked, kRecord };
void set_error_mode(const std::string& mode);
ErrorMode error_mode();
const char* error_mode_name();

// Synchronises every stream that ran an fd_mtp op and raises the first error recorded on one of
// them (ValueError through PD_THROW, naming the op and the argument), clearing it (the stream
// runs ops again). Nothing pending (or a CPU-only build): returns.
void check_pending();

}  // namespace gpu
}  // namespace fd_mtp

#ifdef PADDLE_WITH_CUDA
#include <cuda_runtime_api.h>

#include "../cuda/launchers.h"
#include "../cuda/stream_status.h"

namespace fd_mtp {
namespace check {

inline void cuda(const char* op, cudaError_t err) {
  if (err != cudaSuccess) fail(op, "CUDA", "launch failed: ", cudaGetErrorString(err));
}

}  // namespace check

namespace gpu {

// The ops with a status, by their id in a stream's pending record (generated: stream_ops.gen.cc,
// the order of the raw module's STREAM_OPS).
struct StreamOpInfo {
  const char* name;
  const StatusInfo* table;
  size_t size;
};
const StreamOpInfo* stream_op_info(int32_t id);

// The persistent record of `like`'s stream: allocated (from paddle's allocator, on like's device)
// and zeroed on the stream's first op, then reused for the life of the process.
StreamStatus* stream_record(const char* op, const paddle::Tensor& like);

// A persistent workspace of at least `bytes` for (like's stream, `key`), grow-only: reallocated
// only when it grows (zeroed then when `zeroed`), so a steady step allocates nothing. Reuse is
// ordered by the stream. A zeroed workspace must be left zero by the op that uses it.
void* workspace(const char* op, const paddle::Tensor& like, const char* key, int64_t bytes,
                bool zeroed);

// A tensor the op returns (FastDeploy's contract: outputs are new tensors from paddle's
// allocator); the only allocation the GPU branch makes per call.
paddle::Tensor output(const std::vector<int64_t>& shape, paddle::DataType dtype,
                      const paddle::Place& place);

// One op with a status on a stream: begin (current <- preset, count <- 0) at construction; the
// launcher writes status() / count(); commit() moves its error into the stream's pending record
// (checked mode: synchronises and raises it).
class Op {
 public:
  Op(const char* op, int32_t id, const paddle::Tensor& like);
  KernelStatus* status() { return &record_->current; }
  int64_t* count() { return &record_->count; }
  bool* record_flag() { return &record_->flag; }
  cudaStream_t stream() const { return stream_; }
  void commit();
  // The host reads FastDeploy's contracts need (one synchronisation each; the stream's pending
  // error raises first, outside record mode). After commit():
  //   host_flag   the flag stream_flag computed into record_flag(); false in `ok` when the op
  //               failed or was skipped (then the caller writes no flag);
  //   host_count  the op's count (a shape op's row count); raises the op's own error.
  bool host_flag(bool* ok);
  int64_t host_count();

 private:
  StreamStatus read_record();
  const char* op_;
  int32_t id_;
  cudaStream_t stream_;
  StreamStatus* record_;
};

// An op without a status of its own: launched with the stream's preset (it writes nothing on a
// poisoned stream); checked mode synchronises after it (CUDA errors raise there).
const KernelStatus* preset(const char* op, const paddle::Tensor& like);
void finish(const char* op, const paddle::Tensor& like);

// A shape read (FastDeploy's: the op's output size is data on the device): the value of the
// one-element int32 / int64 tensor `t`, one synchronisation; the stream's pending error raises
// first, by its op's name.
int64_t read_scalar(const char* op, const char* arg, const paddle::Tensor& t);

}  // namespace gpu
}  // namespace fd_mtp
#endif  // PADDLE_WITH_CUDA

namespace fd_mtp {
namespace check {

// A token count held by a one-element int64 (or int32) tensor on any device, read on the host:
// an output's size (fd_mtp.schema: Tensor(count=...)). A device tensor is read back (the shape
// read of FastDeploy's op, one synchronisation, at which the stream's pending error raises). It
// must lie in [0, INT32_MAX]: packed indices and cu_seqlens are int32.
inline int64_t host_count(const char* op, const char* arg, const paddle::Tensor& t) {
  dtype_in(op, arg, t, {paddle::DataType::INT64, paddle::DataType::INT32});
  if (t.numel() != 1)
    fail(op, arg, "must hold exactly one element, got shape ", shape_str(t.shape()));
  int64_t v = 0;
  if (t.is_cpu()) {
    v = t.dtype() == paddle::DataType::INT64 ? t.data<int64_t>()[0] : t.data<int32_t>()[0];
  } else {
#ifdef PADDLE_WITH_CUDA
    v = gpu::read_scalar(op, arg, t);
#else
    unsupported_place(op, arg, t);
#endif
  }
  if (v < 0 || v > std::numeric_limits<int32_t>::max())
    fail(op, arg, "is ", v, "; it must be in [0, ", std::numeric_limits<int32_t>::max(), "]");
  return v;
}

}  // namespace check
}  // namespace fd_mtp
