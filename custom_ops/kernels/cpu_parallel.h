// cpu_parallel: how a CPU driver runs independent tasks on several threads
// without owning any. The caller (the binding layer, which owns the worker threads)
// passes a ParallelFor, or nullptr for one thread; the kernel splits its work
// into tasks whose results do not depend on which thread runs them, so the
// output is the same for every thread count.
#pragma once

#include <cstdint>
#include <type_traits>

namespace fd_mtp {

class ParallelFor {
 public:
  virtual ~ParallelFor() = default;
  // Threads that take tasks, the calling thread included.
  virtual int threads() const = 0;
  // Runs fn(ctx, i) for every i in [0, n), each once, and returns when all have finished.
  virtual void run(int64_t n, void (*fn)(void* ctx, int64_t i), void* ctx) const = 0;
};

// f(i) for i in [0, n): on the pool's threads, or in order on this thread (no pool, one task).
template <class F>
void parallel_for(const ParallelFor* pool, int64_t n, F&& f) {
  if (pool == nullptr || pool->threads() <= 1 || n <= 1) {
    for (int64_t i = 0; i < n; ++i) f(i);
    return;
  }
  using Fn = typename std::remove_reference<F>::type;
  pool->run(n, [](void* ctx, int64_t i) { (*static_cast<Fn*>(ctx))(i); }, &f);
}

}  // namespace fd_mtp
