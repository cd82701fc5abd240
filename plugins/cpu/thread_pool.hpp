#pragma once
// A persistent pool of worker threads for data-parallel loops.
//
// parallel_for(n, fn) calls fn(i) once for every i in [0, n), spread over the workers and
// the calling thread, and returns when all calls are done. Indices are claimed one at a
// time (from n - 1 down to 0), so uneven work balances itself. The caller never waits for
// a worker that has not started: on a machine busy with other processes a descheduled
// worker simply gets no indices, and the caller only waits for calls already running.
// Between loops the workers spin briefly (a decode step issues hundreds of small loops)
// and then sleep on a futex. One loop at a time: the pool belongs to one backend, which
// is driven by one thread.
//
//   thread_pool pool(4);
//   pool.parallel_for(rows, [&](int64_t r) { norm_row(r); });
#include <atomic>
#include <cstdint>
#include <exception>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem::cpu {

class thread_pool {
 public:
  explicit thread_pool(int threads);  // total, including the caller; >= 1
  ~thread_pool();
  thread_pool(const thread_pool&) = delete;
  thread_pool& operator=(const thread_pool&) = delete;

  int size() const { return static_cast<int>(workers_.size()) + 1; }

  template <class F>
  void parallel_for(int64_t n, F&& fn) {
    if (n <= 0) return;
    if (n == 1 || workers_.empty()) {
      for (int64_t i = 0; i < n; ++i) fn(i);
      return;
    }
    run(n, [](void* ctx, int64_t i) { (*static_cast<F*>(ctx))(i); }, &fn);
  }

 private:
  using task_fn = void (*)(void*, int64_t);

  void run(int64_t n, task_fn fn, void* ctx);
  void work(uint32_t generation);  // claims indices of that loop until none are left
  void worker_main();

  std::vector<std::thread> workers_;
  std::atomic<uint32_t> generation_{0};  // bumped to start a loop (workers wait on it)
  std::atomic<uint32_t> in_flight_{0};   // workers inside work()
  // (generation << 32) | indices left: a claim succeeds only for the current loop.
  std::atomic<uint64_t> claim_{0};
  task_fn fn_ = nullptr;
  void* ctx_ = nullptr;
  bool stop_ = false;
  std::mutex error_mutex_;
  std::exception_ptr error_;
};

}  // namespace tandem::cpu
