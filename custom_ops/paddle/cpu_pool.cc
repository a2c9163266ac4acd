// cpu_pool: see cpu_pool.h. A call publishes a job (its fields, then a new generation, under the
// mutex), takes tasks itself with the workers and returns when every task has finished. A worker
// joins a job under the same mutex (busy_), and a call changes the fields only when no worker is
// still in the last job, so a worker never reads a half-written job. Workers spin for about
// kSpinMicroseconds after a job (the next layer's call comes within tens of microseconds in a
// forward), then sleep on a condition variable until the next generation.
#include "cpu_pool.h"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#define FD_MTP_PAUSE() _mm_pause()
#else
#define FD_MTP_PAUSE() std::this_thread::yield()
#endif

namespace fd_mtp {
namespace {

constexpr int64_t kSpinMicroseconds = 200;

class Pool final : public ParallelFor {
 public:
  explicit Pool(int threads) : threads_(threads) {
    for (int w = 1; w < threads; ++w) std::thread([this] { work(); }).detach();
  }

  int threads() const override { return threads_; }

  void run(int64_t n, void (*fn)(void*, int64_t), void* ctx) const override {
    std::lock_guard<std::mutex> one_call(call_);  // calls from several threads take turns
    {
      // No worker can join a job while the mutex is held; wait for those still in the last one
      // (they find no task left) before the job's fields change.
      std::lock_guard<std::mutex> lock(mutex_);
      while (busy_.load(std::memory_order_acquire) > 0) FD_MTP_PAUSE();
      fn_ = fn;
      ctx_ = ctx;
      n_ = n;
      next_.store(0, std::memory_order_relaxed);
      done_.store(0, std::memory_order_relaxed);
      generation_.fetch_add(1, std::memory_order_release);
    }
    if (sleepers_.load(std::memory_order_acquire) > 0) wake_.notify_all();
    take_tasks();
    // every task finished (a worker that joins late finds none: it never touches ctx)
    while (done_.load(std::memory_order_acquire) < n) FD_MTP_PAUSE();
  }

 private:
  void take_tasks() const {
    for (int64_t i = next_.fetch_add(1, std::memory_order_acq_rel); i < n_;
         i = next_.fetch_add(1, std::memory_order_acq_rel)) {
      fn_(ctx_, i);
      done_.fetch_add(1, std::memory_order_acq_rel);
    }
  }

  [[noreturn]] void work() const {
    uint64_t seen = generation_.load(std::memory_order_acquire);
    for (;;) {
      const auto spin_end =
          std::chrono::steady_clock::now() + std::chrono::microseconds(kSpinMicroseconds);
      while (generation_.load(std::memory_order_acquire) == seen &&
             std::chrono::steady_clock::now() < spin_end)
        FD_MTP_PAUSE();
      uint64_t now;
      {
        std::unique_lock<std::mutex> lock(mutex_);
        if (generation_.load(std::memory_order_acquire) == seen) {
          sleepers_.fetch_add(1, std::memory_order_acq_rel);
          wake_.wait(lock, [&] { return generation_.load(std::memory_order_acquire) != seen; });
          sleepers_.fetch_sub(1, std::memory_order_acq_rel);
        }
        busy_.fetch_add(1, std::memory_order_acq_rel);  // joined: the fields stay until we leave
        now = generation_.load(std::memory_order_acquire);
      }
      seen = now;
      take_tasks();
      busy_.fetch_sub(1, std::memory_order_acq_rel);
    }
  }

  const int threads_;
  mutable std::mutex call_, mutex_;
  mutable std::condition_variable wake_;
  mutable std::atomic<uint64_t> generation_{0};
  mutable std::atomic<int> sleepers_{0}, busy_{0};
  mutable std::atomic<int64_t> next_{0}, done_{0};
  mutable void (*fn_)(void*, int64_t) = nullptr;
  mutable void* ctx_ = nullptr;
  mutable int64_t n_ = 0;
};

}  // namespace

const ParallelFor* cpu_pool(int threads) {
  if (threads <= 1) return nullptr;
  static std::mutex mutex;
  // Kept for the life of the process: the workers are detached and wait for work.
  static auto* pools = new std::map<int, std::unique_ptr<Pool>>();
  std::lock_guard<std::mutex> lock(mutex);
  auto& pool = (*pools)[threads];
  if (!pool) pool = std::make_unique<Pool>(threads);
  return pool.get();
}

}  // namespace fd_mtp
