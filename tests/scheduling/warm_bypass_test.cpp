#define BOOST_TEST_MODULE scheduler_warm_bypass
#include <boost/test/unit_test.hpp>

#include "fcfs_scheduler.hpp"
#include "warm_bypass_scheduler.hpp"

using namespace tandem;

namespace {

using plan = std::vector<std::pair<uint64_t, int64_t>>;
using ids = std::vector<uint64_t>;

sched_request waiting_req(uint64_t id, int64_t prompt, int64_t cached = 0, double arrival = 0) {
  sched_request r;
  r.id = id;
  r.prompt_tokens = r.total_tokens = prompt;
  r.cached_tokens = cached;
  r.max_total_tokens = prompt + 100;
  r.arrival_s = arrival;
  return r;
}

sched_request decoding_req(uint64_t id, int64_t len, int page = 16) {
  sched_request r = waiting_req(id, len - 1);
  r.total_tokens = len;
  r.computed_tokens = len - 1;
  r.pages_held = scheduler::pages_for(len - 1, page);
  return r;
}

sched_request prefilling_req(uint64_t id, int64_t prompt, int64_t computed, int page = 16) {
  sched_request r = waiting_req(id, prompt);
  r.computed_tokens = computed;
  r.pages_held = scheduler::pages_for(computed, page);
  return r;
}

plan items(const sched_decision& d) {
  plan out;
  for (auto& i : d.items) out.emplace_back(i.id, i.n_tokens);
  return out;
}

// budget 64, page_tokens 32, max_wait 1000 ms, late_cap 20, one cold prefill at a time.
warm_bypass_settings small() { return {8, 64, 32, 1000, 20, 1}; }

}  // namespace

BOOST_AUTO_TEST_CASE(a_warm_request_skips_ahead_of_a_cold_one) {
  warm_bypass_scheduler s(small());
  std::vector<sched_request> waiting{waiting_req(1, 500), waiting_req(2, 300, 280)};
  sched_state st{{}, waiting, 1000, 1000, 16, 0};
  auto d = s.schedule(st);
  // 2 is warm (R = 20): first. 1 is cold but nothing decodes: it takes the rest, whole
  // pages only (44 -> 32 ends on a page boundary).
  BOOST_TEST((items(d) == plan{{2, 20}, {1, 32}}));
  BOOST_TEST((d.items[0].cls == request_class::warm));
  BOOST_TEST((d.items[1].cls == request_class::cold));
  BOOST_TEST(d.held.empty());
}

BOOST_AUTO_TEST_CASE(a_cold_request_is_held_while_another_decodes_until_it_ages) {
  warm_bypass_scheduler s(small());
  std::vector<sched_request> running{decoding_req(1, 40)};
  std::vector<sched_request> waiting{waiting_req(2, 300, 0, /*arrival=*/0)};
  sched_state st{running, waiting, 1000, 1000, 16, 0.5};
  auto d = s.schedule(st);
  BOOST_TEST((items(d) == plan{{1, 1}}));
  BOOST_TEST((d.held == ids{2}));
  st.now_s = 1.0;  // waited max_wait_ms: proceeds, capped at late_cap, cut to a page edge
  d = s.schedule(st);
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 16}}));
  BOOST_TEST((d.escaped == ids{2}));
  BOOST_TEST((d.capped == ids{2}));
  BOOST_TEST(d.held.empty());
}

BOOST_AUTO_TEST_CASE(a_running_cold_prefill_is_capped_while_others_decode_but_not_its_last_page) {
  warm_bypass_scheduler s(small());
  // Admit 2 as cold while nothing decodes, so the scheduler knows its class.
  std::vector<sched_request> waiting{waiting_req(2, 300)};
  BOOST_TEST((items(s.schedule({{}, waiting, 1000, 1000, 16, 0})) == plan{{2, 64}}));
  std::vector<sched_request> running{decoding_req(1, 40), prefilling_req(2, 300, 64)};
  auto d = s.schedule({running, {}, 1000, 1000, 16, 0.1});
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 16}}));
  BOOST_TEST((d.capped == ids{2}));
  running[1] = prefilling_req(2, 300, 270);  // 30 left <= page_tokens: uncapped
  d = s.schedule({running, {}, 1000, 1000, 16, 0.2});
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 30}}));
  BOOST_TEST(d.capped.empty());
}

BOOST_AUTO_TEST_CASE(cold_work_is_admitted_only_if_the_whole_prompt_fits) {
  warm_bypass_scheduler s(small());
  std::vector<sched_request> waiting{waiting_req(1, 300), waiting_req(2, 20)};
  // 300 tokens need 19 pages; 10 are free. The warm one still runs.
  auto d = s.schedule({{}, waiting, 10, 100, 16, 0});
  BOOST_TEST((items(d) == plan{{2, 20}}));
}

BOOST_AUTO_TEST_CASE(a_warm_request_that_cannot_run_is_pinned) {
  warm_bypass_settings two = small();
  two.max_batch = 2;
  warm_bypass_scheduler s(two);
  std::vector<sched_request> running{decoding_req(1, 40)};
  // A batch of two: request 2 (R = 30) fits; 3 (R = 30, cached 64) does not: pinned, not held.
  std::vector<sched_request> waiting{waiting_req(2, 94, 64), waiting_req(3, 94, 64)};
  auto d = s.schedule({running, waiting, 1000, 1000, 16, 0});
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 30}}));
  BOOST_TEST((d.pin == ids{3}));
  BOOST_TEST(d.held.empty());
}

BOOST_AUTO_TEST_CASE(only_one_cold_prefill_escapes_at_a_time) {
  warm_bypass_scheduler s(small());
  std::vector<sched_request> running{decoding_req(1, 40)};
  std::vector<sched_request> waiting{waiting_req(2, 300), waiting_req(3, 300)};
  auto d = s.schedule({running, waiting, 1000, 1000, 16, 5.0});
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 16}}));
  BOOST_TEST((d.held == ids{3}));
}

BOOST_AUTO_TEST_CASE(a_decode_without_pages_preempts_the_youngest) {
  warm_bypass_scheduler s(small());
  std::vector<sched_request> running{decoding_req(1, 33), decoding_req(2, 10), decoding_req(3, 10)};
  std::vector<sched_request> waiting{waiting_req(4, 10)};
  auto d = s.schedule({running, waiting, 0, 4, 16, 0});
  BOOST_TEST((d.preempt == ids{3}));
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 1}}));  // and no admission in a short step
}

namespace {

// A tiny engine for scripted runs: requests arrive at given times, get what the scheduler
// gives, decode until max_new tokens. Records, per step, the plan and the held requests.
struct script_req {
  uint64_t id;
  double arrival;
  int64_t prompt, cached, max_new;
};

struct step_record {
  plan items;
  ids held;
};

std::vector<step_record> run_script(scheduler& s, std::vector<script_req> reqs, int steps, double dt) {
  std::vector<sched_request> running, waiting;
  std::vector<step_record> out;
  for (int k = 0; k < steps; ++k) {
    const double now = k * dt;
    for (auto& q : reqs)
      if (q.arrival <= now && q.id) {
        sched_request r = waiting_req(q.id, q.prompt, q.cached, q.arrival);
        r.max_total_tokens = q.prompt + q.max_new;
        waiting.push_back(r);
        q.id = 0;
      }
    auto d = s.schedule({running, waiting, 1000, 1000, 16, now});
    out.push_back({items(d), d.held});
    for (const auto& it : d.items) {
      auto w = std::find_if(waiting.begin(), waiting.end(), [&](auto& r) { return r.id == it.id; });
      if (w != waiting.end()) {
        w->computed_tokens = w->cached_tokens;
        running.push_back(*w);
        waiting.erase(w);
      }
      auto& r = *std::find_if(running.begin(), running.end(), [&](auto& r) { return r.id == it.id; });
      r.computed_tokens += it.n_tokens;
      r.pages_held = scheduler::pages_for(r.computed_tokens, 16);
      if (r.computed_tokens == r.total_tokens) ++r.total_tokens;
    }
    std::erase_if(running, [](auto& r) { return r.total_tokens > r.max_total_tokens; });
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(scripted_warm_follow_up_behind_a_long_prefill_under_both_schedulers) {
  // Step 0: 1 (short, generates 8) arrives; step 1: 2 (cold, 200 tokens); step 2: 3, a warm
  // follow-up (180 tokens, 160 cached).
  const std::vector<script_req> reqs{{1, 0.0, 20, 0, 8}, {2, 0.1, 200, 0, 2}, {3, 0.2, 180, 160, 2}};
  fcfs_scheduler f({8, 64, 0});
  auto fs = run_script(f, reqs, 6, 0.1);
  // fcfs: 2 takes the budget each step; 3 is admitted only when budget is left over.
  BOOST_TEST((fs[0].items == plan{{1, 20}}));
  BOOST_TEST((fs[1].items == plan{{1, 1}, {2, 63}}));
  BOOST_TEST((fs[2].items == plan{{1, 1}, {2, 63}}));
  BOOST_TEST((fs[3].items == plan{{1, 1}, {2, 63}}));
  BOOST_TEST((fs[4].items == plan{{1, 1}, {2, 11}, {3, 20}}));

  warm_bypass_scheduler w(small());
  auto ws = run_script(w, reqs, 13, 0.1);
  BOOST_TEST((ws[0].items == plan{{1, 20}}));
  BOOST_TEST((ws[1].items == plan{{1, 1}}));       // 2 is cold and 1 decodes: held
  BOOST_TEST((ws[1].held == ids{2}));
  BOOST_TEST((ws[2].items == plan{{1, 1}, {3, 20}}));  // 3 is warm: in at once
  BOOST_TEST((ws[3].items == plan{{1, 1}, {3, 1}}));
  BOOST_TEST((ws[3].held == ids{2}));
  // 3 finishes at step 4, 1 at step 8; from step 9 nothing decodes and 2 runs whole pages.
  BOOST_TEST((ws[8].held == ids{2}));
  BOOST_TEST((ws[9].items == plan{{2, 64}}));
  BOOST_TEST(ws[9].held.empty());
}

BOOST_AUTO_TEST_CASE(fcfs_long_prefill_threshold_caps_each_request_per_step) {
  fcfs_scheduler f({8, 100, 30});
  std::vector<sched_request> running{decoding_req(1, 40), prefilling_req(2, 300, 32)};
  std::vector<sched_request> waiting{waiting_req(3, 500), waiting_req(4, 10)};
  auto d = f.schedule({running, waiting, 1000, 1000, 16, 0});
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 30}, {3, 30}, {4, 10}}));
}
