#pragma once
// scheduler: each engine step, decides which requests run and how many tokens each
// computes, given the KV pool and what the prefix cache already holds.
//
//   sched_decision d = sched->schedule(state);
//   for (auto& it : d.items) ...   // run it.n_tokens tokens of request it.id
//
// The engine checks every decision against the pool (it never trusts a plugin to stay
// within memory) and reports what it could not honour in the next state.
#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"

namespace tandem {

// How a request stood when admitted: warm = its uncached remainder was small (a cached
// follow-up), cold = a long uncached prompt. Used for metrics split by class.
enum class request_class : uint8_t { unknown, warm, cold };

struct sched_request {
  uint64_t id = 0;
  int64_t prompt_tokens = 0;    // length of the prompt
  int64_t total_tokens = 0;     // prompt + tokens generated so far
  int64_t computed_tokens = 0;  // tokens whose KV is already in the pool
  int64_t cached_tokens = 0;    // waiting requests: prefix the cache would supply now
                                // (>= computed_tokens; re-looked-up every step)
  int64_t max_total_tokens = 0; // total_tokens will not grow past this
  int64_t pages_held = 0;       // pages this request holds in the pool
  double arrival_s = 0;         // engine clock, seconds
  double first_scheduled_s = -1;  // when it was first given tokens; -1 = never

  // Tokens still to compute before the request can sample its next token.
  int64_t remaining() const { return total_tokens - computed_tokens; }
  bool decoding() const { return computed_tokens >= prompt_tokens; }
  // Tokens still to compute once the cached prefix is attached (waiting requests).
  int64_t uncached() const { return total_tokens - std::max(computed_tokens, cached_tokens); }
};

struct sched_state {
  std::span<const sched_request> running;  // admitted, in admission order
  std::span<const sched_request> waiting;  // not admitted, in arrival order
  int64_t free_pages = 0;                  // pages allocatable now (incl. evictable cache)
  int64_t total_pages = 0;
  int page_size = 16;
  double now_s = 0;
};

struct sched_item {
  uint64_t id = 0;
  int64_t n_tokens = 0;  // tokens to compute this step (>= 1); for a waiting request,
                         // counted from the end of its cached prefix
  request_class cls = request_class::unknown;  // set on admission by schedulers that classify
};

struct sched_decision {
  std::vector<sched_item> items;     // running or newly admitted requests to run
  std::vector<uint64_t> preempt;     // running requests to free and requeue (recompute)
  // Waiting requests whose cached prefix the engine should hold by reference until they
  // are admitted (a held warm request must not turn cold); re-sent every step.
  std::vector<uint64_t> pin;
  // What the policy did this step, for metrics and tests: waiting requests held back on
  // purpose, requests admitted because they waited too long, items capped below what
  // they could have had.
  std::vector<uint64_t> held, escaped, capped;
  // Speculative decoding: the most draft tokens the engine may add to this step's decodes,
  // i.e. what the step's token budget leaves after the items (prefill chunks come first;
  // drafts are trimmed to fit). -1: the policy has no token budget.
  int64_t draft_budget = -1;
};

class TANDEM_API scheduler : public plugin_object {
 public:
  ~scheduler() override;
  // Plans one step. Must not schedule more tokens than a request has remaining.
  virtual sched_decision schedule(const sched_state& state) = 0;
  // Pages of `page_size` tokens a request needs to hold `tokens` tokens.
  static int64_t pages_for(int64_t tokens, int page_size) {
    return (tokens + page_size - 1) / page_size;
  }
};

}  // namespace tandem
