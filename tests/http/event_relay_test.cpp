// event_relay: token events leave the engine thread once per step (server/
// event_relay.hpp). These cases fail if an event is lost, duplicated, reordered or merged
// with another, on the relay path, the direct path, and both mixed.
#define BOOST_TEST_MODULE http_event_relay
#include <boost/test/unit_test.hpp>

#include <mutex>
#include <random>
#include <stdexcept>
#include <thread>
#include <vector>

#include "event_relay.hpp"

using tandem::finish_reason;
using tandem::token_event;
using tandem::http::event_relay;

namespace {

// What the callbacks saw, in delivery order: (request, global emission index) per call.
struct recorder {
  std::mutex mu;
  std::vector<std::pair<uint64_t, int32_t>> calls;
  void add(const token_event& ev) {
    std::lock_guard l(mu);
    calls.emplace_back(ev.request_id, ev.token);
  }
};

token_event event(uint64_t request, int32_t index, finish_reason why = finish_reason::none) {
  token_event ev;
  ev.request_id = request;
  ev.token = index;
  ev.finished = why;
  ev.top_logprobs = {{index, -1.0f}};  // a payload that must survive the hand-over intact
  return ev;
}

// Emits `total` events over `requests` requests in random steps of 1..max_step events (so
// both the direct path, at most direct_max, and the relay path run), flushing after each
// step, from one "engine" thread; then checks every event arrived once, alone, in order.
void run_random(size_t direct_max, int max_step, uint32_t seed) {
  constexpr int requests = 40, total = 20000;
  recorder rec;
  {
    event_relay relay(direct_max);
    std::thread engine([&] {
      std::mt19937 rng(seed);
      std::vector<event_relay::callback> cbs;
      for (int r = 0; r < requests; ++r) cbs.push_back(relay.wrap([&rec, r](const token_event& ev) {
        // A payload mixed up with another event's (or another request's) breaks the order check.
        const bool intact = ev.request_id == static_cast<uint64_t>(r) && ev.top_logprobs.size() == 1 &&
                            ev.top_logprobs[0].first == ev.token;
        rec.add(intact ? ev : event(ev.request_id, -1));
      }));
      std::uniform_int_distribution<int> step(1, max_step), pick(0, requests - 1);
      for (int i = 0; i < total;) {
        for (int n = step(rng); n > 0 && i < total; --n, ++i) {
          const int r = pick(rng);
          cbs[r](event(static_cast<uint64_t>(r), i));
        }
        relay.flush();
        if (rng() % 8 == 0) std::this_thread::yield();  // lets the relay go idle now and then
      }
      // The engine drops a finished request's callback at once: what is staged still arrives.
      cbs.clear();
    });
    engine.join();
    relay.stop();
  }
  BOOST_REQUIRE_EQUAL(rec.calls.size(), static_cast<size_t>(total));  // none lost, merged or doubled
  for (size_t i = 0; i < rec.calls.size(); ++i) {
    BOOST_REQUIRE_EQUAL(rec.calls[i].second, static_cast<int32_t>(i));  // emission order, across requests
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(relay_path_keeps_every_event_in_order) { run_random(0, 70, 1); }

BOOST_AUTO_TEST_CASE(direct_and_relay_paths_mixed_keep_order) { run_random(2, 4, 2); }

BOOST_AUTO_TEST_CASE(direct_path_only) { run_random(1000000, 5, 3); }

BOOST_AUTO_TEST_CASE(stop_delivers_what_was_flushed_and_later_flushes_go_direct) {
  recorder rec;
  event_relay relay(0);
  auto cb = relay.wrap([&rec](const token_event& ev) { rec.add(ev); });
  for (int i = 0; i < 100; ++i) cb(event(7, i));
  relay.flush();
  relay.stop();
  BOOST_REQUIRE_EQUAL(rec.calls.size(), 100u);
  cb(event(7, 100, finish_reason::length));
  relay.flush();  // after stop: delivered on this thread
  BOOST_REQUIRE_EQUAL(rec.calls.size(), 101u);
  for (int i = 0; i <= 100; ++i) BOOST_TEST(rec.calls[i].second == i);
}

BOOST_AUTO_TEST_CASE(nothing_arrives_before_the_flush) {
  recorder rec;
  event_relay relay(1000);
  auto cb = relay.wrap([&rec](const token_event& ev) { rec.add(ev); });
  cb(event(1, 0));
  cb(event(1, 1));
  BOOST_TEST(rec.calls.empty());  // staged until the step ends
  relay.flush();
  BOOST_TEST(rec.calls.size() == 2u);
}

BOOST_AUTO_TEST_CASE(a_throwing_callback_does_not_stop_the_others) {
  recorder rec;
  event_relay relay(0);
  auto bad = relay.wrap([](const token_event&) { throw std::runtime_error("consumer failed"); });
  auto good = relay.wrap([&rec](const token_event& ev) { rec.add(ev); });
  for (int i = 0; i < 10; ++i) {
    bad(event(1, i));
    good(event(2, i));
  }
  relay.flush();
  relay.stop();
  BOOST_TEST(rec.calls.size() == 10u);
}
