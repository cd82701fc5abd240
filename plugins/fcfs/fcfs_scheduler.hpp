#pragma once
// scheduler.fcfs: first come, first served with continuous batching and chunked prefill.
//
// Each step: every running request that is decoding gets one token (decodes first, so
// generation never stalls behind a prefill); then running requests that are still
// prefilling continue in chunks, oldest first; then waiting requests are admitted strictly
// in arrival order while the step's token budget, the batch limit and free pages allow
// (the first that does not fit stops admission). A waiting request's chunk starts after
// its cached prefix. long_prefill_token_threshold caps the prompt tokens of one request per
// step (vLLM's knob of that name), so a long prompt leaves budget to others. When a decode
// needs a page and none is free, the youngest running request is preempted (its pages are
// freed and it is recomputed later). A step in which nobody decodes has the larger budget
// lone_prefill_tokens: a long prompt alone is not cut into max_tokens_per_step chunks.
// Speculative decoding's draft tokens share the budget: the decision's draft_budget is what
// the items leave, and the engine trims drafts to it.
#include <cstdint>

#include "tandem/config.hpp"
#include "tandem/scheduler.hpp"

namespace tandem {

struct fcfs_settings {
  int64_t max_batch = 16;                    // most requests in one step
  int64_t max_tokens_per_step = 512;         // token budget of one step (decode + prefill)
  int64_t long_prefill_token_threshold = 0;  // most prompt tokens of one request per step; 0 = budget
  // The budget of a step in which nobody decodes, when larger than max_tokens_per_step
  // (0 here = off; pipelines get the schema's default, 8192).
  int64_t lone_prefill_tokens = 0;

  static fcfs_settings from(const config& cfg);
};

class fcfs_scheduler final : public scheduler {
 public:
  explicit fcfs_scheduler(fcfs_settings s) : s_(s) {}
  sched_decision schedule(const sched_state& state) override;

 private:
  fcfs_settings s_;
};

}  // namespace tandem
