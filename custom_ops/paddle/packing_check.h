// Checks of the rebuild_padding binding: per-request vectors whose batch size comes from a
// named argument.
#pragma once

#include <cstdint>

#include "check.h"

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

}  // namespace packing
}  // namespace fd_mtp
