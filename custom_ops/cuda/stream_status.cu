// The stream-ordered steps of the error model (stream_status.h) and the launchers' status reset.
#include "launch.cuh"
#include "stream_status.h"

namespace fd_mtp {

namespace {

__global__ void status_reset_kernel(KernelStatus* status, int64_t* count) {
  if (status->code != kStatusPoisoned) {
    status->code = 0;
    status->request = 0;
    status->value = 0;
    status->limit = 0;
  }
  status->lock = 0;
  if (count != nullptr) *count = 0;
}

__global__ void stream_begin_kernel(StreamStatus* s) {
  s->current = s->preset;
  s->current.lock = 0;
  s->count = 0;
}

__global__ void stream_commit_kernel(StreamStatus* s, const KernelStatus* slot, int32_t op) {
  const int32_t code = slot->code;
  s->committed += 1;
  if (code == 0 || code == kStatusPoisoned) return;
  if (s->pending.code == 0) {
    s->pending = *slot;
    s->pending.lock = 0;
    s->pending.op = op;
  }
  s->preset = KernelStatus{};
  s->preset.code = kStatusPoisoned;
  s->preset.request = -1;
}

__global__ void stream_clear_kernel(StreamStatus* s) {
  s->pending = KernelStatus{};
  s->preset = KernelStatus{};
}

__global__ void stream_flag_kernel(const KernelStatus* status, const int64_t* count, int64_t offset,
                                   FlagCompare cmp, const int64_t* bound_ptr, int64_t bound,
                                   bool* flag) {
  if (status->code != 0) return;  // the op wrote nothing: neither does its flag
  const int64_t lhs = *count + offset;
  const int64_t rhs = bound_ptr != nullptr ? *bound_ptr : bound;
  bool value = false;
  switch (cmp) {
    case kFlagLess:
      value = lhs < rhs;
      break;
    case kFlagLessEqual:
      value = lhs <= rhs;
      break;
    case kFlagGreater:
      value = lhs > rhs;
      break;
    case kFlagGreaterEqual:
      value = lhs >= rhs;
      break;
    case kFlagEqual:
      value = lhs == rhs;
      break;
    case kFlagNotEqual:
      value = lhs != rhs;
      break;
  }
  *flag = value;
}

}  // namespace

cudaError_t reset_status(KernelStatus* status, int64_t* count, cudaStream_t stream) {
  status_reset_kernel<<<1, 1, 0, stream>>>(status, count);
  return cudaGetLastError();
}

cudaError_t stream_status_begin(StreamStatus* s, cudaStream_t stream) {
  stream_begin_kernel<<<1, 1, 0, stream>>>(s);
  return cudaGetLastError();
}

cudaError_t stream_status_commit(StreamStatus* s, int32_t op, cudaStream_t stream) {
  stream_commit_kernel<<<1, 1, 0, stream>>>(s, &s->current, op);
  return cudaGetLastError();
}

cudaError_t stream_status_clear(StreamStatus* s, cudaStream_t stream) {
  stream_clear_kernel<<<1, 1, 0, stream>>>(s);
  return cudaGetLastError();
}

cudaError_t stream_flag(const KernelStatus* status, const int64_t* count, int64_t offset,
                        FlagCompare cmp, const int64_t* bound_ptr, int64_t bound, bool* flag,
                        cudaStream_t stream) {
  if (cmp < kFlagLess || cmp > kFlagNotEqual) return cudaErrorInvalidValue;
  stream_flag_kernel<<<1, 1, 0, stream>>>(status, count, offset, cmp, bound_ptr, bound, flag);
  return cudaGetLastError();
}

}  // namespace fd_mtp
