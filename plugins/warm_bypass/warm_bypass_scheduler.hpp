#pragma once
// scheduler.warm_bypass: the seed's policy — cached follow-ups skip the queue, cold prompts
// cannot starve anyone.
//
// Every step, each waiting request's uncached remainder R (prompt minus what the prefix
// cache holds now; re-looked-up every step) classifies it:
//   warm  R <= page_tokens: admitted at once, ahead of queue order, its chunk uncapped
//         (within the step budget). A warm request that cannot run yet is pinned, so its
//         cached prefix is not evicted while it waits.
//   cold  R >  page_tokens: held while another request is decoding; admitted at once when
//         nothing decodes (work-conserving). After max_wait_ms in the queue it proceeds
//         anyway (an aging escape). While others decode, a cold prefill takes at most
//         late_cap tokens per step until its last page_tokens, which go uncapped; with
//         nobody decoding it runs at the full budget (lone_prefill_tokens when larger). Cold work is admitted only if its
//         whole prompt fits in the pool, at most max_cold_prefills at once while others
//         decode, in arrival order, and its chunks end on KV page boundaries so each
//         finished page is reusable at once.
// Decodes always go first; preemption is fcfs's (youngest first, recompute).
#include <cstdint>
#include <unordered_map>

#include "tandem/config.hpp"
#include "tandem/scheduler.hpp"

namespace tandem {

class step_builder;

struct warm_bypass_settings {
  int64_t max_batch = 16;
  int64_t max_tokens_per_step = 4096;
  int64_t page_tokens = 3584;     // warm threshold on R, and the uncapped last page of cold work
  double max_wait_ms = 1500;      // a held cold request proceeds after waiting this long
  int64_t late_cap = 512;         // cold prefill tokens per step while others decode
  int64_t max_cold_prefills = 1;  // cold prefills in progress at once while others decode
  int64_t lone_prefill_tokens = 0;  // budget of a step nobody decodes in (0 = off; schema: 8192)

  static warm_bypass_settings from(const config& cfg);
};

class warm_bypass_scheduler final : public scheduler {
 public:
  explicit warm_bypass_scheduler(warm_bypass_settings s) : s_(s) {}
  sched_decision schedule(const sched_state& state) override;

 private:
  bool warm(const sched_request& r) const { return r.uncached() <= s_.page_tokens; }
  bool late_capped(const step_builder& b, int64_t left, bool decoding) const;
  int64_t cold_chunk(const step_builder& b, const sched_request& r, int64_t left, bool decoding) const;
  void run_prefills(step_builder& b, const sched_state& st, request_class cls, bool decoding);
  void admit_warm(step_builder& b, const sched_state& st);
  void admit_cold(step_builder& b, const sched_state& st, bool decoding);
  void forget_gone(const sched_state& st);

  warm_bypass_settings s_;
  std::unordered_map<uint64_t, request_class> class_;  // admitted requests' class
};

}  // namespace tandem
