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

// An op's output (returned to Python). paddle 2.6 allocates nothing for a zero-size tensor, which
// then counts as not initialized, and its pybind caster would return it as None: the returned
// list's caster below turns such an output into an empty tensor of its shape and dtype.
inline paddle::Tensor empty(const std::vector<int64_t>& shape, paddle::DataType dtype,
                            const paddle::Place& place) {
  return paddle::empty(shape, dtype, place);
}

inline paddle::Tensor full(const std::vector<int64_t>& shape, int64_t value, paddle::DataType dtype,
                           const paddle::Place& place) {
  return paddle::full(shape, value, dtype, place);
}

// paddle's name of a dtype (paddle.zeros(shape, name)), or nullptr.
inline const char* dtype_name(paddle::DataType dtype) {
  switch (dtype) {
    case paddle::DataType::FLOAT32:
      return "float32";
    case paddle::DataType::FLOAT16:
      return "float16";
    case paddle::DataType::BFLOAT16:
      return "bfloat16";
    case paddle::DataType::FLOAT64:
      return "float64";
    case paddle::DataType::INT64:
      return "int64";
    case paddle::DataType::INT32:
      return "int32";
    case paddle::DataType::INT16:
      return "int16";
    case paddle::DataType::INT8:
      return "int8";
    case paddle::DataType::UINT8:
      return "uint8";
    case paddle::DataType::BOOL:
      return "bool";
    default:
      return nullptr;
  }
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

// The tensors an op returns (std::vector<paddle::Tensor>, to a Python list). paddle 2.6 (told
// apart by its Tensor lacking is_contiguous) returns a zero-size output, which has no storage
// there, as None: such an output becomes paddle.zeros of its shape and dtype (a zero-size axis
// kept, never shape ()). paddle 3.x returns zero-size tensors as they are.
template <>
struct type_caster<std::vector<paddle::Tensor>> {
  using Value = std::vector<paddle::Tensor>;
  PYBIND11_TYPE_CASTER(Value, _("list[paddle::Tensor]"));

  bool load(handle, bool) { return false; }  // no op takes a list of tensors

  static handle cast(const Value& src, return_value_policy policy, handle parent) {
    list out(src.size());
    size_t i = 0;
    for (const auto& t : src) {
      object item;
      if (needs_zeros(t)) {
        list shape;
        for (int64_t d : t.shape()) shape.append(d);
        item =
            module_::import("paddle").attr("zeros")(shape, fd_mtp::compat::dtype_name(t.dtype()));
      } else {
        item = reinterpret_steal<object>(make_caster<paddle::Tensor>::cast(t, policy, parent));
      }
      PyList_SET_ITEM(out.ptr(), static_cast<ssize_t>(i++), item.release().ptr());
    }
    return out.release();
  }

 private:
  template <typename T = paddle::Tensor>
  static bool needs_zeros(const T& t) {
    if constexpr (fd_mtp::compat::detail::has_is_contiguous<T>::value) {
      return false;
    } else {
      return !t.initialized() && t.numel() == 0 && fd_mtp::compat::dtype_name(t.dtype()) != nullptr;
    }
  }
};

}  // namespace detail
}  // namespace pybind11
#endif  // PYBIND11_VERSION_MAJOR
