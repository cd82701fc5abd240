#define BOOST_TEST_MODULE scheduler_fcfs
#include <boost/test/unit_test.hpp>

#include "fcfs_scheduler.hpp"

using namespace tandem;

namespace {

sched_request waiting_req(uint64_t id, int64_t prompt) {
  sched_request r;
  r.id = id;
  r.prompt_tokens = r.total_tokens = prompt;
  r.max_total_tokens = prompt + 100;
  return r;
}

sched_request decoding_req(uint64_t id, int64_t len, int page = 16) {
  sched_request r = waiting_req(id, len - 1);
  r.total_tokens = len;
  r.computed_tokens = len - 1;
  r.pages_held = scheduler::pages_for(len - 1, page);
  return r;
}

std::vector<std::pair<uint64_t, int64_t>> items(const sched_decision& d) {
  std::vector<std::pair<uint64_t, int64_t>> out;
  for (auto& i : d.items) out.emplace_back(i.id, i.n_tokens);
  return out;
}

using plan = std::vector<std::pair<uint64_t, int64_t>>;

}  // namespace

BOOST_AUTO_TEST_CASE(decodes_go_first_then_prefill_in_arrival_order_within_budget) {
  fcfs_scheduler s({/*max_batch=*/8, /*budget=*/100, /*chunk=*/0});
  std::vector<sched_request> running{decoding_req(1, 20), decoding_req(2, 40)};
  std::vector<sched_request> waiting{waiting_req(3, 60), waiting_req(4, 60)};
  sched_state st{running, waiting, 100, 100, 16, 0};
  auto d = s.schedule(st);
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 1}, {3, 60}, {4, 38}}));
  BOOST_TEST(d.preempt.empty());
}

BOOST_AUTO_TEST_CASE(batch_limit_and_chunk_cap) {
  fcfs_scheduler s({2, 1000, 32});
  std::vector<sched_request> running{};
  std::vector<sched_request> waiting{waiting_req(1, 100), waiting_req(2, 10), waiting_req(3, 5)};
  sched_state st{running, waiting, 100, 100, 16, 0};
  BOOST_TEST((items(s.schedule(st)) == plan{{1, 32}, {2, 10}}));
}

BOOST_AUTO_TEST_CASE(admission_stops_at_the_first_request_that_does_not_fit) {
  fcfs_scheduler s({8, 1000, 0});
  std::vector<sched_request> running{};
  // 3 free pages of 16: request 1 (40 tokens, 3 pages) fits, 2 (20 tokens) does not, and
  // 3 (1 token) must not jump the queue.
  std::vector<sched_request> waiting{waiting_req(1, 40), waiting_req(2, 20), waiting_req(3, 1)};
  sched_state st{running, waiting, 3, 3, 16, 0};
  BOOST_TEST((items(s.schedule(st)) == plan{{1, 40}}));
}

BOOST_AUTO_TEST_CASE(a_decode_without_pages_preempts_the_youngest) {
  fcfs_scheduler s({8, 1000, 0});
  // Request 1 has filled its last page exactly and needs a new one; none is free.
  std::vector<sched_request> running{decoding_req(1, 33), decoding_req(2, 10), decoding_req(3, 10)};
  sched_state st{running, {}, 0, 4, 16, 0};
  auto d = s.schedule(st);
  BOOST_TEST((d.preempt == std::vector<uint64_t>{3}));
  BOOST_TEST((items(d) == plan{{1, 1}, {2, 1}}));
}

BOOST_AUTO_TEST_CASE(the_only_request_that_cannot_grow_is_requeued) {
  fcfs_scheduler s({8, 1000, 0});
  std::vector<sched_request> running{decoding_req(1, 33)};
  sched_state st{running, {}, 0, 2, 16, 0};
  auto d = s.schedule(st);
  BOOST_TEST((d.preempt == std::vector<uint64_t>{1}));
  BOOST_TEST(d.items.empty());
}

BOOST_AUTO_TEST_CASE(scripted_steps_of_a_long_prefill_beside_decodes) {
  // Step by step: a 300-token prompt is chunked under a 128-token budget while request 1
  // keeps decoding one token per step.
  fcfs_scheduler s({8, 128, 0});
  sched_request dec = decoding_req(1, 10);
  sched_request pre = waiting_req(2, 300);
  const plan expected[] = {{{1, 1}, {2, 127}}, {{1, 1}, {2, 127}}, {{1, 1}, {2, 46}}};
  for (const plan& want : expected) {
    std::vector<sched_request> running{dec};
    std::vector<sched_request> waiting;
    (pre.computed_tokens == 0 ? waiting : running).push_back(pre);
    sched_state st{running, waiting, 1000, 1000, 16, 0};
    auto got = items(s.schedule(st));
    BOOST_TEST((got == want));
    dec.total_tokens++, dec.computed_tokens++;
    pre.computed_tokens += got[1].second;
    pre.pages_held = scheduler::pages_for(pre.computed_tokens, 16);
  }
}

BOOST_AUTO_TEST_CASE(a_lone_prefill_takes_the_lone_budget_and_a_decode_brings_back_the_step_budget) {
  fcfs_scheduler s({/*max_batch=*/8, /*budget=*/512, /*chunk=*/0, /*lone=*/8192});
  std::vector<sched_request> none{};
  std::vector<sched_request> waiting{waiting_req(1, 7500)};
  sched_state alone{none, waiting, 1000, 1000, 16, 0};
  BOOST_TEST((items(s.schedule(alone)) == plan{{1, 7500}}));

  std::vector<sched_request> running{decoding_req(2, 40)};
  sched_state with_decode{running, waiting, 1000, 1000, 16, 0};
  BOOST_TEST((items(s.schedule(with_decode)) == plan{{2, 1}, {1, 511}}));

  fcfs_scheduler off({8, 512, 0, 0});
  BOOST_TEST((items(off.schedule(alone)) == plan{{1, 512}}));
}
