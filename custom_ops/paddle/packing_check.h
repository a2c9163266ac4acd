// Checks shared by the packing bindings (speculate_padding.cc,
// rebuild_padding.cc): per-request vectors whose batch size comes from a
// named argument, and token counts that are read on the host.
#pragma once

#include <cstdint>
#include <limits>

#include "check.h"
#include "gpu_stream.h"

namespace fd_mtp {
namespace packing {

// A per-request vector ([n] or [n, 1]) with n >= bsz, where bsz is taken from
// `bsz_arg`. Returns n.
inline int64_t per_request(const char* op, const char* arg, const paddle::Tensor& t,
                           paddle::DataType dt, int64_t bsz, const char* bsz_arg) {
  check::dtype(op, arg, t, dt);
  const auto& s = t.shape();
  if (!(s.size() == 1 || (s.size() == 2 && s[1] == 1)))
    check::fail(op, arg, "must have shape [bsz] or [bsz, 1], got ", check::shape_str(s));
  if (s[0] < bsz)
    check::fail(op, arg, "has ", s[0], " entries but the batch has ", bsz,
                " requests (bsz is taken from ", bsz_arg, ")");
  return s[0];
}

// A token count held by a one-element int64 (or int32) tensor on any device,
// read on the host: the output's size (a device tensor is read back: the shape read of
// FastDeploy's op, one synchronisation, at which the stream's pending error raises). It must
// lie in [0, INT32_MAX]: packed indices and cu_seqlens are int32.
inline int64_t host_count(const char* op, const char* arg, const paddle::Tensor& t) {
  check::dtype_in(op, arg, t, {paddle::DataType::INT64, paddle::DataType::INT32});
  if (t.numel() != 1)
    check::fail(op, arg, "must hold exactly one element, got shape ", check::shape_str(t.shape()));
  int64_t v = 0;
  if (t.is_cpu()) {
    v = t.dtype() == paddle::DataType::INT64 ? t.data<int64_t>()[0] : t.data<int32_t>()[0];
  } else {
#ifdef PADDLE_WITH_CUDA
    v = gpu::read_scalar(op, arg, t);
#else
    check::unsupported_place(op, arg, t);
#endif
  }
  if (v < 0 || v > std::numeric_limits<int32_t>::max())
    check::fail(op, arg, "is ", v, "; it must be in [0, ", std::numeric_limits<int32_t>::max(),
                "]");
  return v;
}

}  // namespace packing
}  // namespace fd_mtp
