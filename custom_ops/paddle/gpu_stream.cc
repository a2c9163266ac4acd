// The Paddle GPU branch's stream records, workspaces and error mode (gpu_stream.h).
#include "gpu_stream.h"

#include <atomic>
#include <map>
#include <mutex>
#include <sstream>
#include <string>
#include <utility>

namespace fd_mtp {
namespace gpu {

namespace {
std::atomic<int> g_mode{static_cast<int>(ErrorMode::kDeferred)};
}  // namespace

void set_error_mode(const std::string& mode) {
  if (mode == "deferred")
    g_mode = static_cast<int>(ErrorMode::kDeferred);
  else if (mode == "checked")
    g_mode = static_cast<int>(ErrorMode::kChecked);
  else if (mode == "record")
    g_mode = static_cast<int>(ErrorMode::kRecord);
  else
    check::fail("fd_mtp", "error mode", "must be deferred, checked or record, got ", mode);
}

ErrorMode error_mode() { return static_cast<ErrorMode>(g_mode.load()); }

const char* error_mode_name() {
  switch (error_mode()) {
    case ErrorMode::kChecked:
      return "checked";
    case ErrorMode::kRecord:
      return "record";
    default:
      return "deferred";
  }
}

#ifndef PADDLE_WITH_CUDA
void check_pending() {}  // no device, no stream: nothing can be pending
#else

namespace {

// Per stream: its record and its workspaces, each a paddle tensor kept for the life of the
// process. The map is never destroyed (paddle's allocator may be gone at exit).
struct StreamState {
  paddle::Tensor record;
  std::map<std::string, paddle::Tensor> workspaces;
};

std::mutex& registry_mutex() {
  static auto* m = new std::mutex;
  return *m;
}

std::map<cudaStream_t, StreamState>& registry() {
  static auto* r = new std::map<cudaStream_t, StreamState>;
  return *r;
}

// The stream's record on the host: one copy after one synchronisation (the host read).
StreamStatus fetch(const char* op, const StreamStatus* record, cudaStream_t stream) {
  StreamStatus host{};
  check::cuda(op, cudaMemcpyAsync(&host, record, sizeof(host), cudaMemcpyDeviceToHost, stream));
  check::cuda(op, cudaStreamSynchronize(stream));
  return host;
}

// Raises the pending error of `host` (the record read back), by its op's name, after clearing
// it on the device (the stream runs ops again).
void raise_pending(const char* op, const StreamStatus& host, StreamStatus* record,
                   cudaStream_t stream) {
  if (host.pending.code == 0) return;
  check::cuda(op, stream_status_clear(record, stream));
  const StreamOpInfo* info = stream_op_info(host.pending.op);
  if (info == nullptr)
    check::fail(op, "input", "is invalid (an op with id ", host.pending.op, ", kernel status ",
                host.pending.code, ")");
  check::status(info->name, host.pending, info->table, info->size);
}

}  // namespace

StreamStatus* stream_record(const char* op, const paddle::Tensor& like) {
  const cudaStream_t stream = like.stream();
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& state = registry()[stream];
  if (!state.record.initialized()) {
    state.record = paddle::empty({static_cast<int64_t>(sizeof(StreamStatus))},
                                 paddle::DataType::UINT8, like.place());
    check::cuda(op, cudaMemsetAsync(state.record.data(), 0, sizeof(StreamStatus), stream));
  }
  return static_cast<StreamStatus*>(state.record.data());
}

void* workspace(const char* op, const paddle::Tensor& like, const char* key, int64_t bytes,
                bool zeroed) {
  const cudaStream_t stream = like.stream();
  const int64_t want = bytes > 0 ? bytes : 1;
  std::lock_guard<std::mutex> lock(registry_mutex());
  auto& buf = registry()[stream].workspaces[key];
  if (!buf.initialized() || buf.numel() < want) {
    buf = paddle::empty({want}, paddle::DataType::UINT8, like.place());
    if (zeroed) check::cuda(op, cudaMemsetAsync(buf.data(), 0, static_cast<size_t>(want), stream));
  }
  return buf.data();
}

paddle::Tensor output(const std::vector<int64_t>& shape, paddle::DataType dtype,
                      const paddle::Place& place) {
  return compat::empty(shape, dtype, place);
}

Op::Op(const char* op, int32_t id, const paddle::Tensor& like)
    : op_(op), id_(id), stream_(like.stream()), record_(stream_record(op, like)) {
  check::cuda(op_, stream_status_begin(record_, stream_));
}

void Op::commit() {
  check::cuda(op_, stream_status_commit(record_, id_, stream_));
  if (error_mode() != ErrorMode::kChecked) return;
  const StreamStatus host = fetch(op_, record_, stream_);
  raise_pending(op_, host, record_, stream_);
}

StreamStatus Op::read_record() {
  const StreamStatus host = fetch(op_, record_, stream_);
  if (error_mode() != ErrorMode::kRecord) raise_pending(op_, host, record_, stream_);
  return host;
}

bool Op::host_flag(bool* ok) {
  const StreamStatus host = read_record();
  *ok = host.current.code == 0;
  return host.flag;
}

int64_t Op::host_count() {
  const StreamStatus host = read_record();
  // record mode (nothing raised): a failed or skipped op has no count; report it here, as the
  // output's shape cannot be made.
  if (host.current.code != 0) {
    const StreamOpInfo* info = stream_op_info(id_);
    if (host.current.code == kStatusPoisoned || info == nullptr)
      check::fail(op_, "input", "was not run: an earlier op on the stream failed (record mode)");
    check::status(info->name, host.current, info->table, info->size);
  }
  return host.count;
}

const KernelStatus* preset(const char* op, const paddle::Tensor& like) {
  return &stream_record(op, like)->preset;
}

void finish(const char* op, const paddle::Tensor& like) {
  if (error_mode() != ErrorMode::kChecked) return;
  check::cuda(op, cudaGetLastError());
  check::cuda(op, cudaStreamSynchronize(like.stream()));
}

namespace {
// The bytes of a device tensor and the stream's record, read in one synchronisation; raises the
// pending error first (outside record mode).
void read_with_record(const char* op, const paddle::Tensor& t, void* host, size_t bytes) {
  const cudaStream_t stream = t.stream();
  StreamStatus* record = stream_record(op, t);
  StreamStatus rec{};
  check::cuda(op, cudaMemcpyAsync(host, t.data(), bytes, cudaMemcpyDeviceToHost, stream));
  check::cuda(op, cudaMemcpyAsync(&rec, record, sizeof(rec), cudaMemcpyDeviceToHost, stream));
  check::cuda(op, cudaStreamSynchronize(stream));
  if (error_mode() != ErrorMode::kRecord) raise_pending(op, rec, record, stream);
}
}  // namespace

int64_t read_scalar(const char* op, const char* arg, const paddle::Tensor& t) {
  if (t.dtype() == paddle::DataType::INT64) {
    int64_t v = 0;
    read_with_record(op, t, &v, sizeof(v));
    return v;
  }
  check::dtype(op, arg, t, paddle::DataType::INT32);
  int32_t v = 0;
  read_with_record(op, t, &v, sizeof(v));
  return v;
}

void check_pending() {
  constexpr const char* op = "check_pending";
  std::vector<std::pair<cudaStream_t, StreamStatus*> > records;
  {
    std::lock_guard<std::mutex> lock(registry_mutex());
    for (auto& [stream, state] : registry())
      if (state.record.initialized())
        records.emplace_back(stream, static_cast<StreamStatus*>(state.record.data()));
  }
  for (const auto& [stream, record] : records)
    raise_pending(op, fetch(op, record, stream), record, stream);
}

#endif  // PADDLE_WITH_CUDA

}  // namespace gpu
}  // namespace fd_mtp
