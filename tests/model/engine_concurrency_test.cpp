#define BOOST_TEST_MODULE engine_concurrency
#include <boost/test/unit_test.hpp>

// Requests submitted from many threads while one thread steps the engine, as the HTTP
// server does: every request must end exactly once, with the tokens it asked for.
#include <atomic>
#include <mutex>
#include <thread>
#include <unordered_map>

#include "tandem/runtime.hpp"

using namespace tandem;

namespace {

std::string default_pipeline() {
  const char* root = std::getenv("TANDEM_SOURCE_ROOT");
  return std::string(root ? root : ".") + "/pipelines/cpu.yaml";
}

struct tally {
  std::mutex mu;
  std::unordered_map<uint64_t, int> tokens, ends;
  std::unordered_map<uint64_t, finish_reason> why;
};

}  // namespace

BOOST_AUTO_TEST_CASE(every_request_ends_exactly_once_under_concurrent_submits) {
  runtime_options opt;
  opt.allow_pull = false;
  auto rt = runtime::open(default_pipeline(), opt);
  std::atomic<bool> stop{false};
  std::thread stepper([&] {
    while (!stop) {
      if (!rt->eng().step()) rt->eng().wait_for_work(std::chrono::milliseconds(5));
    }
  });
  tally t;
  constexpr int threads = 8, per_thread = 40;
  std::vector<std::thread> clients;
  std::atomic<int> ended{0};
  for (int c = 0; c < threads; ++c)
    clients.emplace_back([&, c] {
      for (int i = 0; i < per_thread; ++i) {
        generation_request r;
        r.prompt = rt->tok().encode(std::to_string(c * 1000 + i));
        r.max_new_tokens = 1 + (i % 3);
        r.ignore_eos = true;
        r.on_event = [&](const token_event& ev) {
          std::lock_guard l(t.mu);
          if (ev.token >= 0) ++t.tokens[ev.request_id];
          if (ev.finished != finish_reason::none) {
            ++t.ends[ev.request_id];
            t.why[ev.request_id] = ev.finished;
            ++ended;
          }
        };
        rt->eng().submit(std::move(r));
        if (i % 7 == 0) std::this_thread::sleep_for(std::chrono::milliseconds(1));
      }
    });
  for (auto& c : clients) c.join();
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(120);
  while (ended < threads * per_thread && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  stop = true;
  stepper.join();

  BOOST_TEST(ended.load() == threads * per_thread);
  BOOST_TEST(t.ends.size() == static_cast<size_t>(threads * per_thread));
  for (auto& [id, n] : t.ends) {
    BOOST_TEST(n == 1, "request " << id << " ended " << n << " times");
    BOOST_TEST((t.why[id] == finish_reason::length));
  }
  BOOST_TEST(rt->eng().stats().kv_pages_used == 0);
}
