#include "warm_bypass_scheduler.hpp"

#include <algorithm>
#include <unordered_set>

#include "step_builder.hpp"

namespace tandem {

warm_bypass_settings warm_bypass_settings::from(const config& cfg) {
  warm_bypass_settings s;
  s.max_batch = cfg.get_int("max_batch");
  s.max_tokens_per_step = cfg.get_int("max_tokens_per_step");
  s.page_tokens = cfg.get_int("page_tokens");
  s.max_wait_ms = cfg.get_number("max_wait_ms");
  s.late_cap = cfg.get_int("late_cap");
  s.max_cold_prefills = cfg.get_int("max_cold_prefills");
  s.lone_prefill_tokens = cfg.get_int("lone_prefill_tokens");
  return s;
}

// Whether late_cap (not the budget) limits a cold chunk of a request with `left` tokens.
bool warm_bypass_scheduler::late_capped(const step_builder& b, int64_t left, bool decoding) const {
  return decoding && left > s_.page_tokens && s_.late_cap < std::min(left, b.budget());
}

// A cold chunk: late_cap while others decode, until the last page, which goes whole;
// ended on a KV page boundary when it does not finish the prompt.
int64_t warm_bypass_scheduler::cold_chunk(const step_builder& b, const sched_request& r, int64_t left,
                                          bool decoding) const {
  const bool capped = decoding && left > s_.page_tokens;
  return b.align(r, b.chunk(left, capped ? s_.late_cap : 0), left);
}

void warm_bypass_scheduler::run_prefills(step_builder& b, const sched_state& st, request_class cls, bool decoding) {
  for (const sched_request& r : st.running) {
    if (step_builder::decode_next(r) || b.preempted(r.id) || b.full()) continue;
    auto it = class_.find(r.id);
    const request_class c = it == class_.end() ? request_class::cold : it->second;
    if (c != cls) continue;
    const bool capped = cls == request_class::cold && late_capped(b, r.remaining(), decoding);
    const int64_t n = cls == request_class::warm ? b.chunk(r.remaining(), 0) : cold_chunk(b, r, r.remaining(), decoding);
    if (b.add(r, n) && capped) b.decision().capped.push_back(r.id);
  }
}

void warm_bypass_scheduler::admit_warm(step_builder& b, const sched_state& st) {
  for (const sched_request& r : st.waiting) {
    if (!warm(r)) continue;
    // Skipping ahead is fine here: a warm request that does not fit blocks no one.
    if (b.add(r, b.chunk(r.uncached(), 0), request_class::warm)) {
      class_[r.id] = request_class::warm;
    } else if (r.cached_tokens > 0) {
      b.decision().pin.push_back(r.id);
    }
  }
}

void warm_bypass_scheduler::admit_cold(step_builder& b, const sched_state& st, bool decoding) {
  int64_t cold_running = 0;
  for (const sched_request& r : st.running)
    if (!r.decoding() && class_.count(r.id) && class_[r.id] == request_class::cold) ++cold_running;
  for (const sched_request& r : st.waiting) {
    if (warm(r)) continue;
    const bool aged = (st.now_s - r.arrival_s) * 1000.0 >= s_.max_wait_ms;
    if (decoding && (!aged || cold_running >= s_.max_cold_prefills)) {
      b.decision().held.push_back(r.id);
      continue;
    }
    // The whole prompt must fit before any of it is computed; cold work stays in order.
    if (b.full() || b.extra_pages(r, r.uncached() + 1) > b.free_pages()) break;
    const bool capped = late_capped(b, r.uncached(), decoding);
    if (!b.add(r, cold_chunk(b, r, r.uncached(), decoding), request_class::cold)) break;
    class_[r.id] = request_class::cold;
    ++cold_running;
    if (decoding) b.decision().escaped.push_back(r.id);
    if (capped) b.decision().capped.push_back(r.id);
  }
}

void warm_bypass_scheduler::forget_gone(const sched_state& st) {
  std::unordered_set<uint64_t> live;
  for (const sched_request& r : st.running) live.insert(r.id);
  for (const sched_request& r : st.waiting) live.insert(r.id);
  std::erase_if(class_, [&](const auto& kv) { return !live.count(kv.first); });
}

sched_decision warm_bypass_scheduler::schedule(const sched_state& st) {
  forget_gone(st);
  // "Another request is decoding": one whose next step is a decode.
  const bool decoding = step_builder::anyone_decoding(st);
  step_builder b(st, step_builder::step_budget(st, s_.max_tokens_per_step, s_.lone_prefill_tokens), s_.max_batch);
  const bool no_preemption = b.decodes();
  run_prefills(b, st, request_class::warm, decoding);
  if (no_preemption) admit_warm(b, st);
  run_prefills(b, st, request_class::cold, decoding);
  if (no_preemption) admit_cold(b, st, decoding);
  return b.decision();
}

}  // namespace tandem
