// cpu_pool: the worker threads of the CPU kernels that split their work (fd_mtp::ParallelFor,
// custom_ops/kernels/cpu_parallel.h). One pool per thread count, created on first use and kept
// for the life of the process (its workers wait, spinning briefly, then asleep, between calls).
#pragma once

#include "../kernels/cpu_parallel.h"

namespace fd_mtp {

// The pool of `threads` threads (the caller's included), or nullptr for threads <= 1.
const ParallelFor* cpu_pool(int threads);

}  // namespace fd_mtp
