#include "fcfs_scheduler.hpp"

#include "step_builder.hpp"

namespace tandem {

fcfs_settings fcfs_settings::from(const config& cfg) {
  fcfs_settings s;
  s.max_batch = cfg.get_int("max_batch");
  s.max_tokens_per_step = cfg.get_int("max_tokens_per_step");
  s.long_prefill_token_threshold = cfg.get_int("long_prefill_token_threshold");
  s.lone_prefill_tokens = cfg.get_int("lone_prefill_tokens");
  return s;
}

sched_decision fcfs_scheduler::schedule(const sched_state& st) {
  step_builder b(st, step_builder::step_budget(st, s_.max_tokens_per_step, s_.lone_prefill_tokens), s_.max_batch);
  const int64_t cap = s_.long_prefill_token_threshold;
  const bool no_preemption = b.decodes();

  for (const sched_request& r : st.running) {
    if (step_builder::decode_next(r) || b.preempted(r.id) || b.full()) continue;
    b.add(r, b.chunk(r.remaining(), cap));
  }
  // Admission only when nothing was preempted: the pool is short this step.
  if (!no_preemption) return b.decision();
  for (const sched_request& r : st.waiting) {
    if (b.full() || !b.add(r, b.chunk(r.uncached(), cap))) break;
  }
  return b.decision();
}

}  // namespace tandem
