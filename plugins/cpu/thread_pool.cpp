// thread_pool: generation counter + atomic index; spin, then futex wait (std::atomic::wait).
#include "thread_pool.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#endif

namespace tandem::cpu {
namespace {

// About 20-50 us of spinning: long enough to bridge the gap between two ops of a decode
// step, short enough not to steal a shared core for long.
constexpr int spin_iterations = 20000;

inline void cpu_relax() {
#if defined(__x86_64__) || defined(__i386__)
  _mm_pause();
#endif
}

template <class Pred>
void spin_then_wait(std::atomic<uint32_t>& word, uint32_t seen, Pred done) {
  for (int i = 0; i < spin_iterations; ++i) {
    if (done()) return;
    cpu_relax();
  }
  while (!done()) {
    word.wait(seen, std::memory_order_acquire);
    seen = word.load(std::memory_order_acquire);
  }
}

}  // namespace

thread_pool::thread_pool(int threads) {
  for (int i = 1; i < threads; ++i) workers_.emplace_back([this] { worker_main(); });
}

thread_pool::~thread_pool() {
  stop_ = true;
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  for (auto& t : workers_) t.join();
}

void thread_pool::work() {
  for (int64_t i; (i = next_.fetch_add(1, std::memory_order_relaxed)) < n_;) {
    try {
      fn_(ctx_, i);
    } catch (...) {
      std::lock_guard lock(error_mutex_);
      if (!error_) error_ = std::current_exception();
    }
  }
}

void thread_pool::worker_main() {
  uint32_t seen = 0;
  for (;;) {
    spin_then_wait(generation_, seen,
                   [&] { return generation_.load(std::memory_order_acquire) != seen; });
    seen = generation_.load(std::memory_order_acquire);
    if (stop_) return;
    work();
    if (busy_.fetch_sub(1, std::memory_order_acq_rel) == 1) busy_.notify_one();
  }
}

void thread_pool::run(int64_t n, task_fn fn, void* ctx) {
  n_ = n;
  fn_ = fn;
  ctx_ = ctx;
  error_ = nullptr;
  next_.store(0, std::memory_order_relaxed);
  busy_.store(static_cast<uint32_t>(workers_.size()), std::memory_order_relaxed);
  generation_.fetch_add(1, std::memory_order_release);
  generation_.notify_all();
  work();
  for (uint32_t b; (b = busy_.load(std::memory_order_acquire)) != 0;) {
    spin_then_wait(busy_, b, [&] { return busy_.load(std::memory_order_acquire) != b; });
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace tandem::cpu
