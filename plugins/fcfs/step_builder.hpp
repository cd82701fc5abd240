#pragma once
// step_builder: the bookkeeping every scheduling policy shares while it plans one step —
// the token budget, the batch limit, the pages still free — and the decode pass that runs
// first in every policy (one token per decoding request, preempting the youngest running
// requests when a decode needs a page that is not there).
#include <cstdint>
#include <unordered_set>

#include "tandem/scheduler.hpp"

namespace tandem {

class step_builder {
 public:
  step_builder(const sched_state& st, int64_t budget, int64_t max_batch)
      : st_(st), budget_(budget), max_batch_(max_batch), free_(st.free_pages) {
    d_.draft_budget = budget;
  }

  // The next step of this request computes exactly one token (a decode).
  static bool decode_next(const sched_request& r) { return r.decoding() && r.remaining() == 1; }
  // Whether some running request decodes in the next step.
  static bool anyone_decoding(const sched_state& st);
  // The step's token budget: `per_step`, or `lone` (when larger) if nobody decodes. A
  // prefill that delays no decode gains nothing from small chunks: each step pays the
  // launch and weight-read overhead again (a 7.5k prompt took 119.5 ms in 512-token steps
  // and 29 ms in one of 8,192 on the H200).
  static int64_t step_budget(const sched_state& st, int64_t per_step, int64_t lone);
  // Pages a request must add to hold `n` more tokens from where it stands (for a waiting
  // request: from the end of its cached prefix, whose pages may have to be taken too).
  int64_t extra_pages(const sched_request& r, int64_t n) const;

  // Schedules every running decode, oldest first; returns false when it had to preempt.
  bool decodes();
  // Adds `n` tokens of `r` if the budget, the batch and the pages allow; false otherwise.
  bool add(const sched_request& r, int64_t n, request_class cls = request_class::unknown);
  // Largest chunk a request may take now: its tokens left, the budget left, `cap` if > 0.
  int64_t chunk(int64_t left, int64_t cap) const;
  // Shortens a chunk that does not finish the prompt so that it ends on a page boundary
  // (each finished page is published at once); never below one token.
  int64_t align(const sched_request& r, int64_t n, int64_t left) const;

  bool full() const { return budget_ <= 0 || static_cast<int64_t>(d_.items.size()) >= max_batch_; }
  bool preempted(uint64_t id) const { return preempted_.count(id) > 0; }
  bool scheduled(uint64_t id) const;
  int64_t budget() const { return budget_; }
  int64_t free_pages() const { return free_; }
  sched_decision& decision() { return d_; }

 private:
  const sched_state& st_;
  int64_t budget_, max_batch_, free_;
  std::unordered_set<uint64_t> preempted_;
  sched_decision d_;
};

}  // namespace tandem
