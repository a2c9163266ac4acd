// Bit-exact float32 <-> float16 / bfloat16 conversions (round to nearest even),
// shared by the CPU drivers and the CUDA kernels so that both round every
// element identically (and like numpy's float16 cast and the references'
// bfloat16 rounding). NaN inputs give a quiet NaN (payload not preserved).
#pragma once

#include <cstdint>
#include <cstring>

#include "common.h"

namespace fd_mtp {

enum FloatKind : int32_t { kFloat32 = 0, kFloat16 = 1, kBFloat16 = 2 };

FD_HOST_DEVICE inline uint32_t f32_bits(float f) {
#if defined(__CUDA_ARCH__)
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  return u;
#endif
}

FD_HOST_DEVICE inline float f32_from_bits(uint32_t u) {
#if defined(__CUDA_ARCH__)
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
#endif
}

FD_HOST_DEVICE inline float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t e = (h >> 10) & 0x1fu;
  const uint32_t m = h & 0x3ffu;
  if (e == 0) {  // zero or subnormal: m * 2^-24 (exact in float32)
    const float v = static_cast<float>(m) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  if (e == 31) return f32_from_bits(sign | 0x7f800000u | (m << 13));
  return f32_from_bits(sign | ((e + 112u) << 23) | (m << 13));
}

FD_HOST_DEVICE inline uint16_t float_to_half_bits(float f) {
  const uint32_t x = f32_bits(f);
  const uint32_t sign = (x >> 16) & 0x8000u;
  const uint32_t a = x & 0x7fffffffu;
  if (a >= 0x7f800000u)
    return static_cast<uint16_t>(sign | 0x7c00u | (a > 0x7f800000u ? 0x200u : 0u));
  if (a >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520 rounds to inf
  if (a < 0x38800000u) {  // below 2^-14: a float16 subnormal (or zero)
    if (a < 0x33000000u) return static_cast<uint16_t>(sign);  // below 2^-25: rounds to 0
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | 0x800000u;
    const uint32_t shift = 126u - e;  // in [14, 24]
    uint32_t r = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;
    return static_cast<uint16_t>(sign | r);
  }
  uint32_t r = (a - 0x38000000u) >> 13;
  const uint32_t rem = a & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<uint16_t>(sign | r);
}

FD_HOST_DEVICE inline float bf16_bits_to_float(uint16_t h) {
  return f32_from_bits(static_cast<uint32_t>(h) << 16);
}

FD_HOST_DEVICE inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t x = f32_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Storage traits: `Storage` is the element type in memory; load() / store()
// convert to and from float32.
struct F32 {
  using Storage = float;
  static constexpr FloatKind kind = kFloat32;
  FD_HOST_DEVICE static float load(float v) { return v; }
  FD_HOST_DEVICE static float store(float v) { return v; }
};
struct F16 {
  using Storage = uint16_t;
  static constexpr FloatKind kind = kFloat16;
  FD_HOST_DEVICE static float load(uint16_t v) { return half_bits_to_float(v); }
  FD_HOST_DEVICE static uint16_t store(float v) { return float_to_half_bits(v); }
};
struct BF16 {
  using Storage = uint16_t;
  static constexpr FloatKind kind = kBFloat16;
  FD_HOST_DEVICE static float load(uint16_t v) { return bf16_bits_to_float(v); }
  FD_HOST_DEVICE static uint16_t store(float v) { return float_to_bf16_bits(v); }
};

// Calls fn(Traits{}) for the storage kind `kind` (float32 for unknown kinds;
// the bindings validate the dtype first).
template <typename Fn>
inline auto dispatch_float(FloatKind kind, Fn&& fn) {
  switch (kind) {
    case kFloat16:
      return fn(F16{});
    case kBFloat16:
      return fn(BF16{});
    default:
      return fn(F32{});
  }
}

// True when f is neither NaN nor infinite (bit test: not affected by fast-math).
FD_HOST_DEVICE inline bool finite_f32(float f) {
  return (f32_bits(f) & 0x7f800000u) != 0x7f800000u;
}

// Element i of an untyped float array of storage kind `kind`, as float32.
FD_HOST_DEVICE inline float load_float(const void* base, FloatKind kind, int64_t i) {
  switch (kind) {
    case kFloat16:
      return half_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    case kBFloat16:
      return bf16_bits_to_float(static_cast<const uint16_t*>(base)[i]);
    default:
      return static_cast<const float*>(base)[i];
  }
}

// IEEE float32 arithmetic, never contracted into a fused multiply-add (nvcc
// would otherwise fuse `x - c * b`), so host and device round identically.
FD_HOST_DEVICE inline float mul_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fmul_rn(a, b);
#else
  return a * b;
#endif
}
FD_HOST_DEVICE inline float div_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fdiv_rn(a, b);
#else
  return a / b;
#endif
}
FD_HOST_DEVICE inline float sub_rn(float a, float b) {
#if defined(__CUDA_ARCH__)
  return __fsub_rn(a, b);
#else
  return a - b;
#endif
}

}  // namespace fd_mtp
