// simt runtime: the launch (shape checks, blocks one after another), the block's threads as
// cooperative fibers (ucontext) or, built with SIMT_THREADS (the ThreadSanitizer job), as one OS
// thread each; __syncthreads with divergence detection; the schedules; the error state and the
// host-side CUDA runtime calls. See include/simt/simt.h.
#include <pthread.h>
#include <sys/mman.h>
#include <ucontext.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cstdarg>
#include <cstdio>
#include <cstdlib>
#include <algorithm>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "simt/simt.h"

// The __shared__ variables' section (see __shared__ in simt.h); absent when no kernel has one.
extern "C" char __start_simt_shared[] __attribute__((weak));
extern "C" char __stop_simt_shared[] __attribute__((weak));

// A recorded operation of a stream capture (cudaGraphNode_t): a kernel launch with its own copy
// of the launch's closure (the arguments as they were at the launch), a memset or a copy.
struct CUgraphNode_st {
  cudaGraphNodeType type;
  simt::LaunchConfig cfg{dim3(), dim3()};
  const char* kernel = nullptr;
  const char* file = nullptr;
  int line = 0;
  void (*body)(void*) = nullptr;
  std::shared_ptr<void> closure;  // shared by the graph and its instantiations
  void* dst = nullptr;
  const void* src = nullptr;
  size_t bytes = 0;
  int value = 0;
};
struct CUgraph_st {
  std::vector<CUgraphNode_st> nodes;
};
struct CUgraphExec_st {
  std::vector<CUgraphNode_st> nodes;
};

namespace simt {
namespace {

constexpr size_t kStackBytes = 256 * 1024;  // per CUDA thread
constexpr unsigned kMaxBlockThreads = 1024;
constexpr size_t kMaxDynamicShared = 48 * 1024;  // without cudaFuncSetAttribute opt-in

struct Abort {};  // unwinds an OS thread of the SIMT_THREADS build out of its kernel

// ------------------------------------------------------------------- error state ---
std::mutex g_error_mutex;

// ------------------------------------------------------------------- runtime counters ---
// Every host-visible runtime call the kernels' bindings make, for the sync and allocation
// budgets of tests/gpu/test_gpu_step_budget.py (read through simt_counters, see
// tools/simt/python/simt_counters.py). `waits` counts the blocking calls that found work enqueued
// since the last one: the times a GPU host thread would really wait for the device (a second
// sync or a copy on a drained stream costs a few microseconds, not a round trip).
enum Counter {
  kSyncCalls,      // cudaStreamSynchronize + cudaDeviceSynchronize
  kHostReads,      // blocking device-to-host copies (cudaMemcpy D2H/default, cudaMemcpyAsync D2H)
  kWaits,          // of those two, the ones with enqueued work (see above)
  kMallocs,        // cudaMalloc
  kFrees,          // cudaFree
  kLaunches,       // kernel launches
  kAsyncOps,       // cudaMemsetAsync / cudaMemcpyAsync other than D2H
  kGraphLaunches,  // cudaGraphLaunch (its nodes count as launches / async ops as they run)
  kCapturedNodes,  // launches, memsets and copies recorded by a stream capture (not run)
  kCounters
};
std::atomic<uint64_t> g_counters[kCounters];
std::atomic<bool> g_enqueued{false};  // work was enqueued since the last blocking call
void count(Counter c) { g_counters[c].fetch_add(1, std::memory_order_relaxed); }
void blocking(Counter c) {
  count(c);
  if (g_enqueued.exchange(false)) count(kWaits);
}
void enqueued(Counter c) {
  count(c);
  g_enqueued.store(true);
}
cudaError_t g_error = cudaSuccess;  // pending, until cudaGetLastError
cudaError_t g_message_code = cudaSuccess;
std::string g_message;  // the last error's explanation, for cudaGetErrorString

void set_error(cudaError_t code, const std::string& message) {
  std::lock_guard<std::mutex> lock(g_error_mutex);
  if (g_error != cudaSuccess) return;  // the first error wins
  g_error = code;
  g_message_code = code;
  g_message = "simt: " + message;
  std::fprintf(stderr, "%s\n", g_message.c_str());
}

std::string vformat(const char* fmt, va_list ap) {
  char buf[1024];
  std::vsnprintf(buf, sizeof(buf), fmt, ap);
  return buf;
}

// ------------------------------------------------------------------- stream capture ---
// The streams now capturing (a handful at most). A call CUDA refuses during a capture fails
// with cudaErrorStreamCaptureUnsupported (or ...Implicit for the legacy stream) and invalidates
// the capture it concerns (every active one for a device-wide call); cudaStreamEndCapture then
// returns cudaErrorStreamCaptureInvalidated and no graph. Stricter than CUDA's relaxed mode (the
// one CuPy uses) in one point: cudaMalloc / cudaFree fail any capture, as in the global mode.
struct Capture {
  cudaStream_t stream;
  CUgraph_st* graph;
  bool invalidated = false;
  std::string why;  // the first refused call
};
std::mutex g_capture_mutex;
std::vector<Capture> g_captures;
std::string g_invalidated_why;  // the last capture ended as invalidated, for cudaGetErrorString

bool is_legacy(cudaStream_t s) { return s == nullptr || s == reinterpret_cast<cudaStream_t>(1); }

// Caller holds g_capture_mutex.
Capture* capture_of(cudaStream_t stream) {
  for (Capture& c : g_captures)
    if (c.stream == stream) return &c;
  return nullptr;
}

// A refused call: `stream` null for a device-wide call (every capture). Returns the error,
// cudaSuccess when nothing captures (the call is legal then).
cudaError_t refuse_in_capture(cudaStream_t stream, bool device_wide, const char* call,
                              cudaError_t code = cudaErrorStreamCaptureUnsupported) {
  std::string message;
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    bool hit = false;
    for (Capture& c : g_captures) {
      if (!device_wide && c.stream != stream) continue;
      hit = true;
      if (!c.invalidated) {
        c.invalidated = true;
        c.why = call;
      }
    }
    if (!hit) return cudaSuccess;
    char buf[64];
    std::snprintf(buf, sizeof(buf), "%p", device_wide ? nullptr : static_cast<void*>(stream));
    message = std::string(call) + " is not permitted while " +
              (device_wide ? std::string("a stream is capturing")
                           : std::string("stream ") + buf + " is capturing") +
              " (CUDA graph capture: the capture is invalidated)";
  }
  set_error(code, message);
  return code;
}

// ------------------------------------------------------------------- schedule ---
struct Schedule {
  std::string spec;  // FD_MTP_SIMT_SCHEDULE as last parsed
  bool random = false;
  uint64_t seed = 0;
  uint64_t state = 0;
} g_schedule;

uint64_t next_random() {  // splitmix64
  uint64_t z = (g_schedule.state += 0x9e3779b97f4a7c15ull);
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Reads FD_MTP_SIMT_SCHEDULE: "" or "ordered" (threads in index order, switching only at
// barriers), "random" or "random:<seed>" (seeded random order of thread starts, of switches at
// barriers and atomics, and of blocks). False (with the error set) for anything else.
bool read_schedule() {
  const char* env = std::getenv("FD_MTP_SIMT_SCHEDULE");
  const std::string spec = env ? env : "";
  if (spec == g_schedule.spec && !g_schedule.spec.empty()) return true;
  if (spec.empty() || spec == "ordered") {
    g_schedule = Schedule{spec.empty() ? "ordered" : spec, false, 0, 0};
    return true;
  }
  if (spec == "random" || spec.rfind("random:", 0) == 0) {
    char* end = nullptr;
    const char* digits = spec.size() > 7 ? spec.c_str() + 7 : "1";
    const unsigned long long seed = std::strtoull(digits, &end, 10);
    if (end != nullptr && *end == '\0') {
      g_schedule = Schedule{spec, true, seed, seed};
#if defined(SIMT_THREADS)
      g_schedule.random = false;  // OS threads: the OS schedules them
#endif
      std::fprintf(stderr, "simt: random schedule, seed %llu\n", seed);
      return true;
    }
  }
  set_error(cudaErrorInvalidValue,
            "FD_MTP_SIMT_SCHEDULE=" + spec + ": expected ordered, random or random:<seed>");
  return false;
}

#if !defined(SIMT_THREADS)
// ------------------------------------------------------------------- fiber contexts ---
// A fiber switch saves the callee-saved registers on the fiber's stack and swaps stack
// pointers: no system call (ucontext's swapcontext saves the signal mask with one, which costs
// microseconds per switch in some sandboxes). x86-64 System V; other targets use ucontext.
#if defined(__x86_64__)
extern "C" void simt_switch(void** save_sp, void* load_sp);
asm(R"(
  .text
  .p2align 4
  .globl simt_switch
  .hidden simt_switch
  .type simt_switch, @function
simt_switch:
  pushq %rbp
  pushq %rbx
  pushq %r12
  pushq %r13
  pushq %r14
  pushq %r15
  subq $8, %rsp
  stmxcsr (%rsp)
  fnstcw 4(%rsp)
  movq %rsp, (%rdi)
  movq %rsi, %rsp
  ldmxcsr (%rsp)
  fldcw 4(%rsp)
  addq $8, %rsp
  popq %r15
  popq %r14
  popq %r13
  popq %r12
  popq %rbx
  popq %rbp
  ret
  .size simt_switch, .-simt_switch
)");
struct Context {
  void* sp = nullptr;
};
void* g_scheduler_sp = nullptr;

void fiber_entry();

// A fresh context that starts fiber_entry on [stack, stack + bytes).
void prepare(Context& c, char* stack, size_t bytes) {
  uintptr_t top = (reinterpret_cast<uintptr_t>(stack) + bytes) & ~uintptr_t{15};
  void** sp = reinterpret_cast<void**>(top);
  *--sp = nullptr;                                // fiber_entry's return address: none
  *--sp = reinterpret_cast<void*>(&fiber_entry);  // simt_switch's `ret` goes there
  for (int i = 0; i < 6; ++i) *--sp = nullptr;    // rbp, rbx, r12-r15
  *--sp = nullptr;                                // mxcsr and the x87 control word:
  reinterpret_cast<uint32_t*>(sp)[0] = 0x1f80;    // the defaults
  reinterpret_cast<uint16_t*>(sp)[2] = 0x037f;
  c.sp = sp;
}
void enter(Context& c) { simt_switch(&g_scheduler_sp, c.sp); }
void leave(Context& c) { simt_switch(&c.sp, g_scheduler_sp); }
#else
struct Context {
  ucontext_t uc;
};
ucontext_t g_scheduler;
void fiber_entry();
void prepare(Context& c, char* stack, size_t bytes) {
  getcontext(&c.uc);
  c.uc.uc_stack.ss_sp = stack;
  c.uc.uc_stack.ss_size = bytes;
  c.uc.uc_link = nullptr;
  makecontext(&c.uc, fiber_entry, 0);
}
void enter(Context& c) { swapcontext(&g_scheduler, &c.uc); }
void leave(Context& c) { swapcontext(&c.uc, &g_scheduler); }
#endif
#endif

// ------------------------------------------------------------------- threads and blocks ---
struct Block;

struct Thread {
  Lane lane;
  Block* block = nullptr;
  enum State { kReady, kBarrier, kDone, kFailed } state = kReady;
  // The barrier it waits at.
  const char* file = nullptr;
  int line = 0;
  int op = 0;
  int value = 0;
  bool user = true;
  int result = 0;
  std::vector<std::pair<const void*, uint64_t>> uses;  // CUB storage -> epoch of last use
#if !defined(SIMT_THREADS)
  Context ctx;
  char* stack = nullptr;
#endif
};

struct Block {
  const char* kernel;
  uint3 idx;
  std::vector<Thread> threads;
  uint64_t epoch = 0;  // user __syncthreads completed
  void (*body)(void*);
  void* closure;
#if defined(SIMT_THREADS)
  std::mutex m;
  std::condition_variable cv;
  size_t waiting = 0, exited = 0;
  uint64_t generation = 0;
  bool aborted = false;
  Thread* first_waiter = nullptr;
  int acc = 0;
#endif
};

thread_local Thread* tls_self = nullptr;

std::string where(const Block& b) {
  char buf[256];
  std::snprintf(buf, sizeof(buf), "%s, block (%u, %u, %u)", b.kernel, b.idx.x, b.idx.y, b.idx.z);
  return buf;
}

std::string site(const Thread& t) {
  char buf[512];
  std::snprintf(buf, sizeof(buf), "thread %u at %s%s:%d", t.lane.linear,
                t.op == 0 ? "__syncthreads " : "__syncthreads_<op> ", t.file, t.line);
  return buf;
}

bool same_barrier(const Thread& a, const Thread& b) {
  return a.line == b.line && a.op == b.op && a.user == b.user && std::strcmp(a.file, b.file) == 0;
}

int combine(int op, int acc, int value) {
  switch (op) {
    case 1:
      return acc | value;
    case 2:
      return acc & value;
    case 3:
      return acc + value;
    default:
      return 0;
  }
}

int initial(int op) { return op == 2 ? 1 : 0; }

#if !defined(SIMT_THREADS)
// ------------------------------------------------------------------- fibers ---

std::vector<char*> g_stacks;  // a pool, one per fiber of the largest block so far

char* stack_at(size_t i) {
  while (g_stacks.size() <= i) {
    const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
    void* p = mmap(nullptr, kStackBytes + page, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (p == MAP_FAILED) return nullptr;
    mprotect(p, page, PROT_NONE);  // guard page: an overflow faults instead of corrupting
    g_stacks.push_back(static_cast<char*>(p) + page);
  }
  return g_stacks[i];
}

void fiber_entry() {
  Thread* self = tls_self;
  self->block->body(self->block->closure);
  self->state = Thread::kDone;
  leave(self->ctx);
  std::abort();  // a finished fiber is never resumed
}

// Returns to the scheduler; `state` tells it why.
void switch_out(Thread* self, Thread::State state) {
  self->state = state;
  leave(self->ctx);
  tls_self = self;
}

// The next fiber to run: the first ready one, or (random schedule) any ready one.
size_t take(std::deque<size_t>& ready) {
  size_t pos = g_schedule.random ? static_cast<size_t>(next_random() % ready.size()) : 0;
  const size_t i = ready[pos];
  if (pos != 0) ready[pos] = ready.front();  // the order of the rest does not matter then
  ready.pop_front();
  return i;
}

// Runs one block to completion; false when it failed (the error is set).
bool run_block(Block& blk) {
  const size_t n = blk.threads.size();
  std::deque<size_t> ready;
  for (size_t i = 0; i < n; ++i) {
    Thread& t = blk.threads[i];
    t.stack = stack_at(i);
    if (t.stack == nullptr) {
      set_error(cudaErrorMemoryAllocation, "no memory for the fiber stacks");
      return false;
    }
    prepare(t.ctx, t.stack, kStackBytes);
    ready.push_back(i);
  }
  size_t done = 0;
  for (;;) {
    while (!ready.empty()) {
      const size_t i = take(ready);
      Thread& t = blk.threads[i];
      t.state = Thread::kReady;
      tls_self = &t;
      enter(t.ctx);
      tls_self = nullptr;
      if (t.state == Thread::kFailed) return false;  // the other fibers are abandoned
      if (t.state == Thread::kDone) ++done;
      if (t.state == Thread::kReady) ready.push_back(i);  // a schedule point
    }
    if (done == n) return true;
    // Every live thread waits at a barrier: the same one, and nobody has exited?
    Thread* first = nullptr;
    const Thread* exited = nullptr;
    for (Thread& t : blk.threads) {
      if (t.state == Thread::kDone) {
        if (exited == nullptr) exited = &t;
        continue;
      }
      if (first == nullptr) {
        first = &t;
      } else if (!same_barrier(*first, t)) {
        set_error(cudaErrorLaunchFailure,
                  where(blk) + ": __syncthreads divergence: " + site(*first) + ", " + site(t));
        return false;
      }
    }
    if (exited != nullptr) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "thread %u has exited", exited->lane.linear);
      set_error(cudaErrorLaunchFailure,
                where(blk) + ": __syncthreads divergence: " + site(*first) + " but " + buf);
      return false;
    }
    int acc = initial(first->op);
    for (Thread& t : blk.threads) acc = combine(first->op, acc, t.value);
    if (first->user) ++blk.epoch;
    for (size_t i = 0; i < n; ++i) {
      blk.threads[i].result = acc;
      ready.push_back(i);
    }
  }
}

#else
// ------------------------------------------------------------------- OS threads ---
// A persistent pool: worker i runs thread i of every block (starting OS threads is what costs
// most under ThreadSanitizer). The hand-offs go through mutexes, so ThreadSanitizer sees every
// block ordered after the previous one and after the launching thread's writes.
void run_thread(Thread* self) {
  tls_self = self;
  Block& blk = *self->block;
  try {
    blk.body(blk.closure);
    std::unique_lock<std::mutex> lock(blk.m);
    self->state = Thread::kDone;
    ++blk.exited;
    if (blk.waiting > 0 && !blk.aborted) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "thread %u has exited", self->lane.linear);
      set_error(cudaErrorLaunchFailure, where(blk) + ": __syncthreads divergence: " +
                                            site(*blk.first_waiter) + " but " + buf);
      blk.aborted = true;
      blk.cv.notify_all();
    }
  } catch (const Abort&) {
    std::lock_guard<std::mutex> lock(blk.m);
    self->state = Thread::kFailed;
    blk.aborted = true;
    blk.cv.notify_all();
  }
  tls_self = nullptr;
}

struct Worker {
  std::mutex m;
  std::condition_variable cv;
  Thread* job = nullptr;
  pthread_t id;
};

struct Pool {
  std::mutex m;
  std::condition_variable done;
  size_t remaining = 0;
  std::vector<Worker*> workers;  // never freed: they live as long as the process
} g_pool;

void* worker_main(void* arg) {
  Worker* w = static_cast<Worker*>(arg);
  for (;;) {
    Thread* job;
    {
      std::unique_lock<std::mutex> lock(w->m);
      w->cv.wait(lock, [&] { return w->job != nullptr; });
      job = w->job;
      w->job = nullptr;
    }
    run_thread(job);
    std::lock_guard<std::mutex> lock(g_pool.m);
    if (--g_pool.remaining == 0) g_pool.done.notify_one();
  }
  return nullptr;
}

bool run_block(Block& blk) {
  const size_t n = blk.threads.size();
  while (g_pool.workers.size() < n) {
    Worker* w = new Worker;
    pthread_attr_t attr;
    pthread_attr_init(&attr);
    pthread_attr_setstacksize(&attr, kStackBytes);
    const int rc = pthread_create(&w->id, &attr, worker_main, w);
    pthread_attr_destroy(&attr);
    if (rc != 0) {
      delete w;
      set_error(cudaErrorLaunchOutOfResources, where(blk) + ": cannot start an OS thread");
      return false;
    }
    pthread_detach(w->id);
    g_pool.workers.push_back(w);
  }
  {
    std::lock_guard<std::mutex> lock(g_pool.m);
    g_pool.remaining = n;
  }
  for (size_t i = 0; i < n; ++i) {
    Worker* w = g_pool.workers[i];
    std::lock_guard<std::mutex> lock(w->m);
    w->job = &blk.threads[i];
    w->cv.notify_one();
  }
  std::unique_lock<std::mutex> lock(g_pool.m);
  g_pool.done.wait(lock, [] { return g_pool.remaining == 0; });
  return !blk.aborted;
}
#endif

// ------------------------------------------------------------------- launch checks ---
bool check_shape(const LaunchConfig& c, const char* kernel, const char* file, int line) {
  const uint64_t threads = uint64_t(c.block.x) * c.block.y * c.block.z;
  const char* problem = nullptr;
  if (threads == 0 || c.grid.x == 0 || c.grid.y == 0 || c.grid.z == 0)
    problem = "an empty grid or block";
  else if (threads > kMaxBlockThreads || c.block.x > 1024 || c.block.y > 1024 || c.block.z > 64)
    problem = "more than 1024 threads per block (or block.y > 1024, block.z > 64)";
  else if (c.grid.x > 2147483647u || c.grid.y > 65535 || c.grid.z > 65535)
    problem = "a grid beyond (2^31 - 1, 65535, 65535)";
  else if (c.shared_bytes > kMaxDynamicShared)
    problem = "more than 48 KiB of dynamic shared memory";
  if (problem == nullptr) return true;
  char buf[512];
  std::snprintf(buf, sizeof(buf), "%s launched at %s:%d with grid (%u, %u, %u), block (%u, %u, %u)",
                kernel, file, line, c.grid.x, c.grid.y, c.grid.z, c.block.x, c.block.y, c.block.z);
  set_error(cudaErrorInvalidConfiguration, std::string(buf) + ": " + problem);
  return false;
}

void poison_shared() {
  if (__start_simt_shared == nullptr || __stop_simt_shared == nullptr) return;
  const int byte = g_schedule.random ? static_cast<int>(next_random() & 0xff) : 0xa5;
  std::memset(__start_simt_shared, byte,
              static_cast<size_t>(__stop_simt_shared - __start_simt_shared));
}

}  // namespace

// ------------------------------------------------------------------- device-side API ---
const Lane& current() {
  if (tls_self == nullptr) {
    std::fprintf(stderr, "simt: threadIdx/blockIdx/__syncthreads used outside a kernel\n");
    std::abort();
  }
  return tls_self->lane;
}

void fail(const char* fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  const std::string what = vformat(fmt, ap);
  va_end(ap);
  Thread* self = tls_self;
  if (self == nullptr) {
    std::fprintf(stderr, "simt: %s (outside a kernel)\n", what.c_str());
    std::abort();
  }
  set_error(cudaErrorLaunchFailure, where(*self->block) + ": " + what);
#if defined(SIMT_THREADS)
  throw Abort{};
#else
  switch_out(self, Thread::kFailed);  // never resumed
  std::abort();
#endif
}

int sync_threads(const char* file, int line, int op, int value, bool user) {
  Thread* self = tls_self;
  if (self == nullptr) current();  // aborts with the message
  self->file = file;
  self->line = line;
  self->op = op;
  self->value = value;
  self->user = user;
#if !defined(SIMT_THREADS)
  switch_out(self, Thread::kBarrier);
  return self->result;
#else
  Block& blk = *self->block;
  std::unique_lock<std::mutex> lock(blk.m);
  if (blk.aborted) throw Abort{};
  if (blk.waiting == 0) {
    blk.first_waiter = self;
    blk.acc = initial(op);
  } else if (!same_barrier(*blk.first_waiter, *self)) {
    set_error(cudaErrorLaunchFailure, where(blk) + ": __syncthreads divergence: " +
                                          site(*blk.first_waiter) + ", " + site(*self));
    blk.aborted = true;
    blk.cv.notify_all();
    throw Abort{};
  }
  if (blk.exited > 0) {
    set_error(cudaErrorLaunchFailure,
              where(blk) + ": __syncthreads divergence: " + site(*self) + " but a thread exited");
    blk.aborted = true;
    blk.cv.notify_all();
    throw Abort{};
  }
  blk.acc = combine(op, blk.acc, value);
  self->state = Thread::kBarrier;
  if (++blk.waiting == blk.threads.size()) {
    blk.waiting = 0;
    if (user) ++blk.epoch;
    for (Thread& t : blk.threads) t.result = blk.acc;
    ++blk.generation;
    blk.cv.notify_all();
  } else {
    const uint64_t gen = blk.generation;
    blk.cv.wait(lock, [&] { return blk.generation != gen || blk.aborted; });
    if (blk.generation == gen) throw Abort{};
  }
  self->state = Thread::kReady;
  return self->result;
#endif
}

uint64_t barrier_epoch() {
  current();
#if defined(SIMT_THREADS)
  std::lock_guard<std::mutex> lock(tls_self->block->m);
#endif
  return tls_self->block->epoch;
}

void schedule_point() {
#if !defined(SIMT_THREADS)
  Thread* self = tls_self;
  // One atomic in four: enough to interleave, cheap enough for rows of 100k atomics.
  if (self != nullptr && g_schedule.random && (next_random() & 3) == 0)
    switch_out(self, Thread::kReady);
#endif
}

bool random_schedule() { return g_schedule.random; }

uint64_t rand_below(uint64_t n) { return n == 0 ? 0 : next_random() % n; }

uint64_t exchange_use(const void* key, uint64_t epoch) {
  current();
  for (auto& use : tls_self->uses)
    if (use.first == key) {
      const uint64_t old = use.second;
      use.second = epoch;
      return old;
    }
  tls_self->uses.emplace_back(key, epoch);
  return ~uint64_t{0};
}

namespace {
void execute_kernel(const LaunchConfig& cfg, const char* kernel, const char* file, int line,
                    void (*body)(void*), void* closure) {
  {
    std::lock_guard<std::mutex> lock(g_error_mutex);
    if (g_error == cudaErrorLaunchFailure) return;  // a failed kernel poisons what follows
  }
  enqueued(kLaunches);
  if (!read_schedule() || !check_shape(cfg, kernel, file, line)) return;
  const dim3 g = cfg.grid, b = cfg.block;
  const uint64_t blocks = uint64_t(g.x) * g.y * g.z;
  std::vector<uint64_t> order(blocks);
  for (uint64_t i = 0; i < blocks; ++i) order[i] = i;
  if (g_schedule.random)
    for (uint64_t i = blocks; i > 1; --i) std::swap(order[i - 1], order[next_random() % i]);
  const unsigned n = b.x * b.y * b.z;
  for (uint64_t k : order) {
    Block blk;
    blk.kernel = kernel;
    blk.idx = uint3{unsigned(k % g.x), unsigned(k / g.x % g.y), unsigned(k / g.x / g.y)};
    blk.body = body;
    blk.closure = closure;
    blk.threads.resize(n);
    for (unsigned i = 0; i < n; ++i) {
      Thread& t = blk.threads[i];
      t.block = &blk;
      t.lane = Lane{uint3{i % b.x, i / b.x % b.y, i / b.x / b.y}, blk.idx, b, g, i};
    }
    poison_shared();
    if (!run_block(blk)) return;
  }
}

}  // namespace

void run_kernel(const LaunchConfig& cfg, const char* kernel, const char* file, int line,
                void (*body)(void*), void* closure, void* (*clone)(const void*),
                void (*destroy)(void*)) {
  if (tls_self != nullptr) {
    set_error(cudaErrorNotSupported, std::string(kernel) + ": launched from a kernel");
    return;
  }
  {
    std::lock_guard<std::mutex> lock(g_capture_mutex);
    if (Capture* c = capture_of(cfg.stream)) {
      if (!read_schedule() || !check_shape(cfg, kernel, file, line)) return;
      CUgraphNode_st node;
      node.type = cudaGraphNodeTypeKernel;
      node.cfg = cfg;
      node.kernel = kernel;
      node.file = file;
      node.line = line;
      node.body = body;
      node.closure = std::shared_ptr<void>(clone(closure), destroy);
      c->graph->nodes.push_back(std::move(node));
      count(kCapturedNodes);
      return;
    }
  }
  execute_kernel(cfg, kernel, file, line, body, closure);
}

// Runs a graph's nodes in order on the host (a graph launch).
void replay(const std::vector<CUgraphNode_st>& nodes) {
  for (const CUgraphNode_st& n : nodes) {
    switch (n.type) {
      case cudaGraphNodeTypeKernel:
        execute_kernel(n.cfg, n.kernel, n.file, n.line, n.body, n.closure.get());
        break;
      case cudaGraphNodeTypeMemset:
        enqueued(kAsyncOps);
        if (n.bytes) std::memset(n.dst, n.value, n.bytes);
        break;
      case cudaGraphNodeTypeMemcpy:
        enqueued(kAsyncOps);
        if (n.bytes) std::memmove(n.dst, n.src, n.bytes);
        break;
    }
  }
}

// Records a memset / copy node when `stream` captures; false when it does not.
bool record_async(cudaStream_t stream, cudaGraphNodeType type, void* dst, const void* src,
                  size_t bytes, int value) {
  std::lock_guard<std::mutex> lock(g_capture_mutex);
  Capture* c = capture_of(stream);
  if (c == nullptr) return false;
  CUgraphNode_st node;
  node.type = type;
  node.dst = dst;
  node.src = src;
  node.bytes = bytes;
  node.value = value;
  c->graph->nodes.push_back(std::move(node));
  count(kCapturedNodes);
  return true;
}

}  // namespace simt

// ------------------------------------------------------------------- host runtime calls ---
using simt::set_error;

extern "C" {

// The counters above, in Counter order, into out[0 .. n) (n <= kCounters); returns kCounters.
__attribute__((visibility("default"))) int simt_counters(uint64_t* out, int n) {
  for (int i = 0; i < n && i < simt::kCounters; ++i) out[i] = simt::g_counters[i].load();
  return simt::kCounters;
}
// A blocking host read made outside the runtime (the CuPy stand-in's asnumpy / get): returns
// cudaErrorStreamCaptureUnsupported (and invalidates the captures) while a stream captures, as
// the device-to-host copy behind it fails there in CUDA; 0 otherwise.
__attribute__((visibility("default"))) int simt_note_host_read(void) {
  const cudaError_t err =
      simt::refuse_in_capture(nullptr, true, "a host read of device memory (cudaMemcpy D2H)");
  if (err != cudaSuccess) return err;
  simt::blocking(simt::kHostReads);
  return 0;
}

cudaError_t cudaMalloc(void** ptr, size_t bytes) {
  *ptr = nullptr;
  if (cudaError_t err = simt::refuse_in_capture(nullptr, true, "cudaMalloc")) return err;
  simt::count(simt::kMallocs);
  *ptr = std::malloc(bytes == 0 ? 1 : bytes);
  return *ptr ? cudaSuccess : cudaErrorMemoryAllocation;
}
cudaError_t cudaFree(void* ptr) {
  if (cudaError_t err = simt::refuse_in_capture(nullptr, true, "cudaFree")) return err;
  if (ptr != nullptr) simt::count(simt::kFrees);
  std::free(ptr);
  return cudaSuccess;
}
static cudaError_t simt_copy(void* dst, const void* src, size_t bytes) {
  if (bytes) std::memmove(dst, src, bytes);
  return cudaSuccess;
}
// Blocking for the host: D2H (and "default", which the bindings use for reads) waits for the
// device; H2D and D2D are ordered on the device without a host wait. A synchronous copy runs on
// the legacy stream, which a capture forbids.
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind) {
  if (cudaError_t err = simt::refuse_in_capture(nullptr, true, "cudaMemcpy (synchronous)"))
    return err;
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyDefault)
    simt::blocking(simt::kHostReads);
  else
    simt::enqueued(simt::kAsyncOps);
  return simt_copy(dst, src, bytes);
}
// On a capturing stream a device-to-device (or default) copy is recorded; a copy from or to the
// host fails the capture (the emulator cannot tell pinned host memory from pageable).
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind,
                            cudaStream_t stream) {
  if (kind == cudaMemcpyDeviceToHost || kind == cudaMemcpyHostToDevice ||
      kind == cudaMemcpyHostToHost) {
    if (cudaError_t err = simt::refuse_in_capture(stream, false,
                                                  "cudaMemcpyAsync between host and device memory"))
      return err;
  } else if (simt::record_async(stream, cudaGraphNodeTypeMemcpy, dst, src, bytes, 0)) {
    return cudaSuccess;
  }
  if (kind == cudaMemcpyDeviceToHost)  // into pageable host memory: returns once copied
    simt::blocking(simt::kHostReads);
  else
    simt::enqueued(simt::kAsyncOps);
  return simt_copy(dst, src, bytes);
}
cudaError_t cudaMemset(void* ptr, int value, size_t bytes) {
  if (cudaError_t err = simt::refuse_in_capture(nullptr, true, "cudaMemset (synchronous)"))
    return err;
  if (bytes) std::memset(ptr, value, bytes);
  return cudaSuccess;
}
cudaError_t cudaMemsetAsync(void* ptr, int value, size_t bytes, cudaStream_t stream) {
  if (simt::record_async(stream, cudaGraphNodeTypeMemset, ptr, nullptr, bytes, value))
    return cudaSuccess;
  simt::enqueued(simt::kAsyncOps);
  if (bytes) std::memset(ptr, value, bytes);
  return cudaSuccess;
}
// Launches run synchronously: a stream has nothing left to wait for, but a kernel's failure is
// reported here too (as CUDA reports asynchronous errors), until cudaGetLastError clears it.
// Synchronising a capturing stream, or the legacy stream (which waits for every stream) while
// any stream captures, fails the capture.
cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  const bool legacy = simt::is_legacy(stream);
  if (cudaError_t err = simt::refuse_in_capture(
          stream, legacy, "cudaStreamSynchronize",
          legacy ? cudaErrorStreamCaptureImplicit : cudaErrorStreamCaptureUnsupported))
    return err;
  simt::blocking(simt::kSyncCalls);
  return cudaPeekAtLastError();
}
cudaError_t cudaDeviceSynchronize(void) {
  if (cudaError_t err = simt::refuse_in_capture(nullptr, true, "cudaDeviceSynchronize")) return err;
  simt::blocking(simt::kSyncCalls);
  return cudaPeekAtLastError();
}

// ------------------------------------------------------------------- stream capture ---
cudaError_t cudaStreamBeginCapture(cudaStream_t stream, cudaStreamCaptureMode) {
  if (simt::is_legacy(stream)) {
    set_error(cudaErrorStreamCaptureUnsupported,
              "cudaStreamBeginCapture: the legacy default stream cannot be captured");
    return cudaErrorStreamCaptureUnsupported;
  }
  std::lock_guard<std::mutex> lock(simt::g_capture_mutex);
  if (simt::capture_of(stream) != nullptr) {
    set_error(cudaErrorIllegalState, "cudaStreamBeginCapture: the stream is already capturing");
    return cudaErrorIllegalState;
  }
  simt::g_captures.push_back(simt::Capture{stream, new CUgraph_st});
  return cudaSuccess;
}
cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t* graph) {
  *graph = nullptr;
  simt::Capture c;
  {
    std::lock_guard<std::mutex> lock(simt::g_capture_mutex);
    auto& all = simt::g_captures;
    auto it = std::find_if(all.begin(), all.end(),
                           [&](const simt::Capture& x) { return x.stream == stream; });
    if (it == all.end()) {
      set_error(cudaErrorIllegalState, "cudaStreamEndCapture: the stream is not capturing");
      return cudaErrorIllegalState;
    }
    c = *it;
    all.erase(it);
  }
  if (c.invalidated) {
    delete c.graph;
    {
      // The refused call's error was returned by that call: it does not stay pending.
      std::lock_guard<std::mutex> lock(simt::g_error_mutex);
      if (simt::g_error == cudaErrorStreamCaptureUnsupported ||
          simt::g_error == cudaErrorStreamCaptureImplicit)
        simt::g_error = cudaSuccess;
      simt::g_invalidated_why = c.why;
    }
    return cudaErrorStreamCaptureInvalidated;
  }
  *graph = c.graph;
  return cudaSuccess;
}
cudaError_t cudaStreamIsCapturing(cudaStream_t stream, cudaStreamCaptureStatus* status) {
  std::lock_guard<std::mutex> lock(simt::g_capture_mutex);
  const simt::Capture* c = simt::capture_of(stream);
  *status = c == nullptr     ? cudaStreamCaptureStatusNone
            : c->invalidated ? cudaStreamCaptureStatusInvalidated
                             : cudaStreamCaptureStatusActive;
  return cudaSuccess;
}
cudaError_t cudaGraphInstantiate(cudaGraphExec_t* exec, cudaGraph_t graph, unsigned long long) {
  if (graph == nullptr) return cudaErrorInvalidValue;
  *exec = new CUgraphExec_st{graph->nodes};
  return cudaSuccess;
}
// Runs the graph's nodes now, in order (launches are synchronous on the emulator). Launching a
// graph into a capture (a child graph) is not modelled.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
  if (exec == nullptr) return cudaErrorInvalidValue;
  {
    std::lock_guard<std::mutex> lock(simt::g_capture_mutex);
    if (simt::capture_of(stream) != nullptr) {
      set_error(cudaErrorNotSupported,
                "cudaGraphLaunch into a capturing stream (a child graph) is not modelled");
      return cudaErrorNotSupported;
    }
  }
  simt::count(simt::kGraphLaunches);
  simt::replay(exec->nodes);
  return cudaSuccess;
}
cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
  delete graph;
  return cudaSuccess;
}
cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
  delete exec;
  return cudaSuccess;
}
cudaError_t cudaGraphGetNodes(cudaGraph_t graph, cudaGraphNode_t* nodes, size_t* count) {
  if (graph == nullptr || count == nullptr) return cudaErrorInvalidValue;
  if (nodes != nullptr)
    for (size_t i = 0; i < *count && i < graph->nodes.size(); ++i) nodes[i] = &graph->nodes[i];
  *count = graph->nodes.size();
  return cudaSuccess;
}
cudaError_t cudaGraphNodeGetType(cudaGraphNode_t node, cudaGraphNodeType* type) {
  if (node == nullptr) return cudaErrorInvalidValue;
  *type = node->type;
  return cudaSuccess;
}

// The CuPy stand-in's entry points (tools/simt/python/cupy: cupy.cuda.runtime's capture
// functions): the calls above on integer handles; each returns the cudaError_t.
__attribute__((visibility("default"))) int simt_stream_begin_capture(uintptr_t stream, int mode) {
  return cudaStreamBeginCapture(reinterpret_cast<cudaStream_t>(stream),
                                static_cast<cudaStreamCaptureMode>(mode));
}
__attribute__((visibility("default"))) int simt_stream_end_capture(uintptr_t stream,
                                                                   uintptr_t* graph) {
  cudaGraph_t g = nullptr;
  const cudaError_t err = cudaStreamEndCapture(reinterpret_cast<cudaStream_t>(stream), &g);
  *graph = reinterpret_cast<uintptr_t>(g);
  return err;
}
__attribute__((visibility("default"))) int simt_stream_is_capturing(uintptr_t stream, int* status) {
  cudaStreamCaptureStatus st;
  const cudaError_t err = cudaStreamIsCapturing(reinterpret_cast<cudaStream_t>(stream), &st);
  *status = st;
  return err;
}
__attribute__((visibility("default"))) int simt_graph_instantiate(uintptr_t graph,
                                                                  uintptr_t* exec) {
  cudaGraphExec_t e = nullptr;
  const cudaError_t err = cudaGraphInstantiate(&e, reinterpret_cast<cudaGraph_t>(graph), 0);
  *exec = reinterpret_cast<uintptr_t>(e);
  return err;
}
__attribute__((visibility("default"))) int simt_graph_launch(uintptr_t exec, uintptr_t stream) {
  return cudaGraphLaunch(reinterpret_cast<cudaGraphExec_t>(exec),
                         reinterpret_cast<cudaStream_t>(stream));
}
__attribute__((visibility("default"))) int simt_graph_destroy(uintptr_t graph) {
  return cudaGraphDestroy(reinterpret_cast<cudaGraph_t>(graph));
}
__attribute__((visibility("default"))) int simt_graph_exec_destroy(uintptr_t exec) {
  return cudaGraphExecDestroy(reinterpret_cast<cudaGraphExec_t>(exec));
}
// The node count of an instantiated graph by type (out[0] kernels, out[1] copies, out[2]
// memsets); returns the total.
__attribute__((visibility("default"))) int64_t simt_graph_exec_nodes(uintptr_t exec, int64_t* out) {
  const auto* e = reinterpret_cast<const CUgraphExec_st*>(exec);
  out[0] = out[1] = out[2] = 0;
  for (const CUgraphNode_st& n : e->nodes) ++out[n.type];
  return static_cast<int64_t>(e->nodes.size());
}
// The error name and string of a code (for the stand-in's CUDARuntimeError), and clears the
// pending error (as CuPy's check_status reads it).
__attribute__((visibility("default"))) const char* simt_error_name(int err) {
  return cudaGetErrorName(static_cast<cudaError_t>(err));
}
__attribute__((visibility("default"))) const char* simt_error_string(int err) {
  return cudaGetErrorString(static_cast<cudaError_t>(err));
}
__attribute__((visibility("default"))) int simt_get_last_error(void) { return cudaGetLastError(); }
__attribute__((visibility("default"))) int simt_stream_synchronize(uintptr_t stream) {
  return cudaStreamSynchronize(reinterpret_cast<cudaStream_t>(stream));
}
__attribute__((visibility("default"))) int simt_device_synchronize(void) {
  return cudaDeviceSynchronize();
}
cudaError_t cudaGetLastError(void) {
  std::lock_guard<std::mutex> lock(simt::g_error_mutex);
  const cudaError_t e = simt::g_error;
  simt::g_error = cudaSuccess;
  return e;
}
cudaError_t cudaPeekAtLastError(void) {
  std::lock_guard<std::mutex> lock(simt::g_error_mutex);
  return simt::g_error;
}
const char* cudaGetErrorName(cudaError_t err) {
  switch (err) {
    case cudaSuccess:
      return "cudaSuccess";
    case cudaErrorInvalidValue:
      return "cudaErrorInvalidValue";
    case cudaErrorMemoryAllocation:
      return "cudaErrorMemoryAllocation";
    case cudaErrorInvalidConfiguration:
      return "cudaErrorInvalidConfiguration";
    case cudaErrorInvalidDevice:
      return "cudaErrorInvalidDevice";
    case cudaErrorSymbolNotFound:
      return "cudaErrorSymbolNotFound";
    case cudaErrorLaunchOutOfResources:
      return "cudaErrorLaunchOutOfResources";
    case cudaErrorLaunchFailure:
      return "cudaErrorLaunchFailure";
    case cudaErrorIllegalState:
      return "cudaErrorIllegalState";
    case cudaErrorNotSupported:
      return "cudaErrorNotSupported";
    case cudaErrorStreamCaptureUnsupported:
      return "cudaErrorStreamCaptureUnsupported";
    case cudaErrorStreamCaptureInvalidated:
      return "cudaErrorStreamCaptureInvalidated";
    case cudaErrorStreamCaptureImplicit:
      return "cudaErrorStreamCaptureImplicit";
    default:
      return "cudaErrorUnknown";
  }
}
const char* cudaGetErrorString(cudaError_t err) {
  std::lock_guard<std::mutex> lock(simt::g_error_mutex);
  if (err != cudaSuccess && err == simt::g_message_code) return simt::g_message.c_str();
  if (err == cudaErrorStreamCaptureInvalidated) {
    static thread_local std::string why;
    why = "simt: the stream capture was invalidated by " + simt::g_invalidated_why;
    return why.c_str();
  }
  if (err == cudaErrorNotSupported) return "operation not supported (simt: no CUDA IPC on the CPU)";
  return cudaGetErrorName(err);
}
cudaError_t cudaGetDevice(int* device) {
  *device = 0;
  return cudaSuccess;
}
cudaError_t cudaSetDevice(int device) { return device == 0 ? cudaSuccess : cudaErrorInvalidDevice; }
cudaError_t cudaGetDeviceCount(int* count) {
  *count = 1;
  return cudaSuccess;
}
cudaError_t cudaIpcGetMemHandle(cudaIpcMemHandle_t*, void*) { return cudaErrorNotSupported; }
cudaError_t cudaIpcOpenMemHandle(void**, cudaIpcMemHandle_t, unsigned int) {
  return cudaErrorNotSupported;
}
cudaError_t cudaIpcCloseMemHandle(void*) { return cudaErrorNotSupported; }
cudaError_t cudaGetDriverEntryPoint(const char*, void** fn, unsigned long long,
                                    cudaDriverEntryPointQueryResult* status) {
  *fn = nullptr;
  if (status) *status = cudaDriverEntryPointSymbolNotFound;
  return cudaErrorNotSupported;
}
cudaError_t cudaGetDriverEntryPointByVersion(const char* symbol, void** fn, unsigned int,
                                             unsigned long long flags,
                                             cudaDriverEntryPointQueryResult* status) {
  return cudaGetDriverEntryPoint(symbol, fn, flags, status);
}

}  // extern "C"
