// Philox4x32-10 (Salmon, Moraes, Dror, Shaw: "Parallel random numbers: as easy
// as 1, 2, 3", SC 2011), the counter-based generator behind curand's Philox,
// JAX and PyTorch. Written once for host and device so that the CPU driver,
// the CUDA kernel and the numpy reference (fd_mtp/reference/verify.py) draw
// bit-identical numbers. Tested against the Random123 known-answer vectors.
#pragma once

#include <cstdint>

#include "common.h"

namespace fd_mtp {

struct Philox4x32 {
  uint32_t v[4];
};

FD_HOST_DEVICE inline void philox_mulhilo(uint32_t a, uint32_t b, uint32_t* hi, uint32_t* lo) {
  const uint64_t prod = static_cast<uint64_t>(a) * static_cast<uint64_t>(b);
  *hi = static_cast<uint32_t>(prod >> 32);
  *lo = static_cast<uint32_t>(prod);
}

// Ten rounds on counter `c` with key (k0, k1); the key is bumped by the Weyl
// constants between rounds.
FD_HOST_DEVICE inline Philox4x32 philox4x32_10(Philox4x32 c, uint32_t k0, uint32_t k1) {
  for (int round = 0; round < 10; ++round) {
    if (round > 0) {
      k0 += 0x9E3779B9u;
      k1 += 0xBB67AE85u;
    }
    uint32_t hi0, lo0, hi1, lo1;
    philox_mulhilo(0xD2511F53u, c.v[0], &hi0, &lo0);
    philox_mulhilo(0xCD9E8D57u, c.v[2], &hi1, &lo1);
    const Philox4x32 next{{hi1 ^ c.v[1] ^ k0, lo1, hi0 ^ c.v[3] ^ k1, lo0}};
    c = next;
  }
  return c;
}

// One uniform float in (0, 1] for (seed, offset, stream, draw): key =
// (seed low, seed high), counter = (draw, stream, offset low, offset high);
// ((word0 >> 8) + 1) * 2^-24 is exact in float32.
FD_HOST_DEVICE inline float philox_uniform(uint64_t seed, uint64_t offset, uint32_t stream,
                                           uint32_t draw) {
  const Philox4x32 ctr{
      {draw, stream, static_cast<uint32_t>(offset), static_cast<uint32_t>(offset >> 32)}};
  const Philox4x32 out =
      philox4x32_10(ctr, static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32));
  return static_cast<float>((out.v[0] >> 8) + 1u) * 5.9604644775390625e-08f;  // 2^-24
}

}  // namespace fd_mtp
