// Argument checks for the Paddle bindings. Every failure throws (PD_THROW),
// which Paddle surfaces in Python; fd_mtp.ops re-raises it as ValueError.
// Messages start with "<op>: <argument>" so the user sees what to fix.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "paddle/extension.h"
#include "../kernels/common.h"
#include "paddle_compat.h"

namespace fd_mtp {
namespace check {

inline std::string shape_str(const std::vector<int64_t>& shape) {
  std::ostringstream os;
  os << "[";
  for (size_t i = 0; i < shape.size(); ++i) os << (i ? ", " : "") << shape[i];
  os << "]";
  return os.str();
}

template <typename... Parts>
[[noreturn]] inline void fail(const char* op, const char* arg, Parts&&... parts) {
  std::ostringstream os;
  os << op << ": " << arg << " ";
  (os << ... << parts);
  PD_THROW(os.str());
}

inline void dtype(const char* op, const char* arg, const paddle::Tensor& t,
                  paddle::DataType expected) {
  if (t.dtype() != expected) fail(op, arg, "must be ", expected, ", got ", t.dtype());
}

inline void dtype_in(const char* op, const char* arg, const paddle::Tensor& t,
                     std::initializer_list<paddle::DataType> allowed) {
  for (auto d : allowed)
    if (t.dtype() == d) return;
  std::ostringstream os;
  for (auto d : allowed) os << (os.tellp() ? " or " : "") << d;
  fail(op, arg, "must be ", os.str(), ", got ", t.dtype());
}

// Tensors an op reads or writes must live on the same device as `ref`.
inline void same_place(const char* op, const char* arg, const paddle::Tensor& t,
                       const paddle::Tensor& ref, const char* ref_arg) {
  if (t.place() != ref.place())
    fail(op, arg, "must be on the same device as ", ref_arg, " (", ref.place().DebugString(),
         "), got ", t.place().DebugString());
}

// Every tensor in `args` must be on the same device as `ref`.
inline void same_place(const char* op, const char* ref_arg, const paddle::Tensor& ref,
                       std::initializer_list<std::pair<const char*, const paddle::Tensor*>> args) {
  for (const auto& a : args) same_place(op, a.first, *a.second, ref, ref_arg);
}

// The branch taken when a tensor is neither on the CPU nor on a GPU this
// build supports.
[[noreturn]] inline void unsupported_place(const char* op, const char* arg,
                                           const paddle::Tensor& t) {
  fail(op, arg, "is on a device this build of fd_mtp does not support (", t.place().DebugString(),
       "); rebuild with a CUDA-enabled paddle");
}

inline void on_cpu(const char* op, const char* arg, const paddle::Tensor& t) {
  if (!t.is_cpu()) fail(op, arg, "must be a CPU tensor, got one on ", t.place().DebugString());
}

// A tensor that holds exactly one element (e.g. not_need_stop).
inline void scalar(const char* op, const char* arg, const paddle::Tensor& t, paddle::DataType dt) {
  dtype(op, arg, t, dt);
  if (t.numel() != 1)
    fail(op, arg, "must hold exactly one element, got shape ", shape_str(t.shape()));
}

// Turns a kernel's status record into an exception naming the argument.
inline void status(const char* op, const KernelStatus& st, const StatusInfo* table, size_t n) {
  if (st.code == 0) return;
  for (size_t i = 0; i < n; ++i) {
    const StatusInfo& info = table[i];
    if (info.code != st.code) continue;
    std::ostringstream os;
    if (st.request >= 0) os << "(request " << st.request << ") ";
    // Expand {value} and {limit} in the description.
    std::string what = info.what;
    for (const char* key : {"{value}", "{limit}"}) {
      size_t pos;
      const std::string rep = std::to_string(key[1] == 'v' ? st.value : st.limit);
      while ((pos = what.find(key)) != std::string::npos) what.replace(pos, 7, rep);
    }
    fail(op, info.argument, os.str(), what);
  }
  fail(op, "input", "is invalid (kernel status ", st.code, ")");
}

template <size_t N>
inline void status(const char* op, const KernelStatus& st, const StatusInfo (&table)[N]) {
  status(op, st, table, N);
}

// The int64 value of a one-element CPU tensor (the CPU branch's bounds, e.g. stop_nums; the GPU
// branch reads a device one on the device).
inline int64_t host_int64(const char* op, const char* arg, const paddle::Tensor& t) {
  scalar(op, arg, t, paddle::DataType::INT64);
  if (!t.is_cpu())
    fail(op, arg, "must be on the CPU when the op runs on the CPU, got one on ",
         t.place().DebugString());
  return t.data<int64_t>()[0];
}

// Shape inference of a declared output (fd_mtp.schema.Out): axis `axis` of an input's shape,
// -1 when it is unknown; a dim plus a constant, -1 staying -1.
inline int64_t infer_dim(const std::vector<int64_t>& shape, size_t axis) {
  return axis < shape.size() ? shape[axis] : -1;
}
inline int64_t infer_add(int64_t dim, int64_t add) { return dim < 0 ? -1 : dim + add; }

// dim(t, i) of a schema expression: axis i of a shape (negative: from the end). The schema's
// rules check the rank before they read an axis.
inline int64_t dim_of(const std::vector<int64_t>& shape, int64_t axis) {
  return shape[static_cast<size_t>(axis < 0 ? static_cast<int64_t>(shape.size()) + axis : axis)];
}

}  // namespace check
}  // namespace fd_mtp

#include "../kernels/float_bits.h"

namespace fd_mtp {
namespace check {

// The kernels' storage kind of a float32 / float16 / bfloat16 tensor (its
// dtype must have been checked with dtype_in first).
inline FloatKind float_kind_of(const paddle::Tensor& t) {
  if (t.dtype() == paddle::DataType::FLOAT16) return kFloat16;
  if (t.dtype() == paddle::DataType::BFLOAT16) return kBFloat16;
  return kFloat32;
}

}  // namespace check
}  // namespace fd_mtp

// ---------------------------------------------------------------------------
// Checks the generated bindings use (cmake/gen_ops.py, from fd_mtp/schema).
// ---------------------------------------------------------------------------
namespace fd_mtp {
namespace check {

// Every tensor an op reads or writes through a raw pointer must be dense:
// a strided view (x[:, ::2], x.t(), as_strided) would be read and written
// as if it were contiguous.
inline void contiguous(const char* op, const char* arg, const paddle::Tensor& t) {
  if (!compat::is_contiguous(t))
    fail(op, arg, "must be contiguous, got a strided view of shape ", shape_str(t.shape()),
         " (pass x.contiguous())");
}

// A vector: shape [n] or [n, 1]. Returns n. `batch` names it in the message
// when the vector is per-request.
inline int64_t vec(const char* op, const char* arg, const paddle::Tensor& t, bool batch) {
  const auto& s = t.shape();
  if (!(s.size() == 1 || (s.size() == 2 && s[1] == 1)))
    fail(op, arg,
         batch ? "must have shape [bsz] or [bsz, 1], got " : "must have shape [n] or [n, 1], got ",
         shape_str(s));
  return s[0];
}

// The batch-defining vector [bsz + add] (cu_seqlens_q: [bsz + 1]). Returns bsz.
inline int64_t batch_plus(const char* op, const char* arg, const paddle::Tensor& t, int64_t add) {
  const auto& s = t.shape();
  if (s.size() != 1 || s[0] < add)
    fail(op, arg, "must have shape [bsz + ", add, "], got ", shape_str(s));
  return s[0] - add;
}

inline void rank(const char* op, const char* arg, const paddle::Tensor& t, size_t n) {
  if (t.shape().size() != n) fail(op, arg, "must be ", n, "-D, got shape ", shape_str(t.shape()));
}

inline const char* axis_word(size_t axis, size_t rank) {
  if (rank == 2) return axis == 0 ? "rows" : "columns";
  return axis == 0 ? "entries" : "elements along that axis";
}

// Axis `axis` of `t` must be at least `low` (`low` bound to `name` by `from`).
inline void dim_at_least(const char* op, const char* arg, const paddle::Tensor& t, size_t axis,
                         int64_t low, const char* name, const char* from, bool batch) {
  const int64_t n = t.shape()[axis];
  if (n >= low) return;
  if (batch)
    fail(op, arg, "has ", n, " ", axis_word(axis, t.shape().size()), " but the batch has ", low,
         " requests (bsz is taken from ", from, ")");
  if (name == nullptr)
    fail(op, arg, "needs at least ", low, " ", axis_word(axis, t.shape().size()), ", got shape ",
         shape_str(t.shape()));
  fail(op, arg, "has ", n, " ", axis_word(axis, t.shape().size()), " but needs at least ", name,
       " = ", low, " (from ", from, ")");
}

// Axis `axis` of `t` must equal `value`, bound to `name` by `from`.
inline void dim_equal(const char* op, const char* arg, const paddle::Tensor& t, size_t axis,
                      int64_t value, const char* name, const char* from) {
  if (t.shape()[axis] == value) return;
  fail(op, arg, "must have ", value, " ", axis_word(axis, t.shape().size()), " (", name, ", from ",
       from, "), got shape ", shape_str(t.shape()));
}

inline void numel_at_least(const char* op, const char* arg, const paddle::Tensor& t, int64_t n) {
  if (t.numel() < n)
    fail(op, arg, "must hold at least ", n, n == 1 ? " element" : " elements", ", got shape ",
         shape_str(t.shape()));
}

// An integer attribute in [lo, hi].
template <typename T>
inline void attr_range(const char* op, const char* arg, T v, T lo, T hi) {
  if (v < lo) fail(op, arg, "must be >= ", lo, ", got ", v);
  if (v > hi) fail(op, arg, "must be <= ", hi, ", got ", v);
}

}  // namespace check
}  // namespace fd_mtp
