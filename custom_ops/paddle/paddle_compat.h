// What differs between the paddle versions fd_mtp builds against (3.x: the CPU build of .venv;
// 2.6: paddlepaddle-gpu 2.6.2, the CUDA build that `make test` compiles the GPU branch against),
// in one place. Each difference is detected from the API itself (no version macros), so one
// source builds against both. The Python side of the same differences:
// fd_mtp/ops/_paddle_compat.py.
#pragma once

#include <cstdint>
#include <type_traits>
#include <utility>
#include <vector>

#include "paddle/extension.h"
#if __has_include("paddle/common/ddim.h")
#include "paddle/common/ddim.h"  // Tensor::strides()'s type (2.6's tensor.h only declares it)
#endif

namespace fd_mtp {
namespace compat {

namespace detail {

template <typename T, typename = void>
struct has_is_contiguous : std::false_type {};
template <typename T>
struct has_is_contiguous<T, std::void_t<decltype(std::declval<const T&>().is_contiguous())>>
    : std::true_type {};

}  // namespace detail

// Whether `t` is dense (row-major, no gaps). paddle 3.x: Tensor::is_contiguous. paddle 2.6 has no
// such member; its Tensor::strides() (2.6 introduced strided views) is compared with the strides
// of a dense tensor of the same shape (axes of size 1 may have any stride, as in 3.x).
template <typename T = paddle::Tensor>
inline bool is_contiguous(const T& t) {
  if constexpr (detail::has_is_contiguous<T>::value) {
    return t.is_contiguous();
  } else {
    if (!t.is_dense_tensor() || !t.initialized()) return true;  // nothing strided to read
    const auto shape = t.shape();
    const auto strides = t.strides();
    if (strides.size() != static_cast<int>(shape.size())) return true;  // no strides recorded
    int64_t expected = 1;
    for (int i = static_cast<int>(shape.size()) - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
}

namespace detail {

// paddle 2.6 allocates nothing for a zero-size tensor, and such a tensor counts as not
// initialized: its pybind caster returns it to Python as None. A tensor of the same shape that
// is a zero-row view of a one-row allocation is initialized under every version.
inline paddle::Tensor with_storage(paddle::Tensor t, const std::vector<int64_t>& shape) {
  if (t.initialized() || shape.empty() || shape[0] != 0) return t;
  std::vector<int64_t> one = shape;
  one[0] = 1;
  for (int64_t d : one)
    if (d == 0) return t;  // a zero-size axis past the first: left as paddle made it
  return paddle::empty(one, t.dtype(), t.place()).slice(0, 0);
}

}  // namespace detail

// An op's output (returned to Python): paddle::empty / paddle::full, except that a zero-row
// output has storage (a Python tensor of shape (0, ...), never None) under every paddle version.
inline paddle::Tensor empty(const std::vector<int64_t>& shape, paddle::DataType dtype,
                            const paddle::Place& place) {
  return detail::with_storage(paddle::empty(shape, dtype, place), shape);
}

inline paddle::Tensor full(const std::vector<int64_t>& shape, int64_t value, paddle::DataType dtype,
                           const paddle::Place& place) {
  return detail::with_storage(paddle::full(shape, value, dtype, place), shape);
}

}  // namespace compat
}  // namespace fd_mtp

// pybind11's caster of paddle::optional<paddle::Tensor> (the optional inputs of the generated
// pybind module, gen/pybind_gen.cc). paddle 2.6's (paddle/utils/pybind.h over its bundled
// pybind11's optional_caster) calls optional::emplace, which 2.6's paddle::optional lacks; this
// full specialisation, used with every paddle version, assigns instead. Included after
// paddle/utils/pybind.h, before any binding.
#ifdef PYBIND11_VERSION_MAJOR
namespace pybind11 {
namespace detail {

template <>
struct type_caster<paddle::optional<paddle::Tensor>> {
  using Value = paddle::optional<paddle::Tensor>;
  PYBIND11_TYPE_CASTER(Value, _("Optional[paddle::Tensor]"));

  bool load(handle src, bool convert) {
    if (!src) return false;
    if (src.is_none()) {
      value = Value();
      return true;
    }
    make_caster<paddle::Tensor> inner;
    if (!inner.load(src, convert)) return false;
    value = Value(cast_op<paddle::Tensor&&>(std::move(inner)));
    return true;
  }

  template <typename T>
  static handle cast(T&& src, return_value_policy policy, handle parent) {
    if (!src) return none().release();
    return make_caster<paddle::Tensor>::cast(*std::forward<T>(src), policy, parent);
  }
};

}  // namespace detail
}  // namespace pybind11
#endif  // PYBIND11_VERSION_MAJOR
