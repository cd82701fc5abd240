// thread_pool: generation counter + atomic index; spin, then futex wait (std::atomic::wait).
#include "thread_pool.hpp"

#include <stdexcept>

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

void thread_pool::work(uint32_t generation) {
  for (;;) {
    uint64_t c = claim_.load(std::memory_order_acquire);
    int64_t i = -1;
    while (static_cast<uint32_t>(c >> 32) == generation && static_cast<uint32_t>(c) > 0) {
      if (claim_.compare_exchange_weak(c, c - 1, std::memory_order_acq_rel)) {
        i = static_cast<uint32_t>(c) - 1;
        break;
      }
    }
    if (i < 0) return;
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
    // Counted before claiming, so the caller that sees zero after the last claim knows
    // every running call has finished; a late worker finds nothing left to claim.
    in_flight_.fetch_add(1, std::memory_order_seq_cst);
    work(seen);
    if (in_flight_.fetch_sub(1, std::memory_order_acq_rel) == 1) in_flight_.notify_one();
  }
}

void thread_pool::run(int64_t n, task_fn fn, void* ctx) {
  if (n > 0xffffffffLL) throw std::length_error("thread_pool: more than 2^32 tasks");
  fn_ = fn;
  ctx_ = ctx;
  error_ = nullptr;
  const uint32_t g = generation_.load(std::memory_order_relaxed) + 1;
  claim_.store((uint64_t{g} << 32) | static_cast<uint64_t>(n), std::memory_order_release);
  generation_.store(g, std::memory_order_seq_cst);
  generation_.notify_all();
  work(g);
  for (uint32_t b; (b = in_flight_.load(std::memory_order_seq_cst)) != 0;) {
    spin_then_wait(in_flight_, b, [&] { return in_flight_.load(std::memory_order_acquire) != b; });
  }
  if (error_) std::rethrow_exception(error_);
}

}  // namespace tandem::cpu
