#include "fcfs_scheduler.hpp"

#include <algorithm>
#include <unordered_set>

namespace tandem {

fcfs_settings fcfs_settings::from(const config& cfg) {
  fcfs_settings s;
  s.max_batch = cfg.get_int("max_batch");
  s.max_tokens_per_step = cfg.get_int("max_tokens_per_step");
  s.max_prefill_chunk = cfg.get_int("max_prefill_chunk");
  return s;
}

namespace {

// Pages a request must add to hold `n` more tokens.
int64_t extra_pages(const sched_request& r, int64_t n, int page_size) {
  return std::max<int64_t>(0, scheduler::pages_for(r.computed_tokens + n, page_size) - r.pages_held);
}

}  // namespace

sched_decision fcfs_scheduler::schedule(const sched_state& st) {
  sched_decision d;
  int64_t budget = s_.max_tokens_per_step;
  int64_t free = st.free_pages;
  std::unordered_set<uint64_t> preempted;
  const int64_t chunk_cap = s_.max_prefill_chunk > 0 ? s_.max_prefill_chunk : budget;

  // Running requests, oldest first: decodes take one token, prefills a chunk.
  for (size_t i = 0; i < st.running.size(); ++i) {
    const sched_request& r = st.running[i];
    if (preempted.count(r.id) || budget <= 0 || static_cast<int64_t>(d.items.size()) >= s_.max_batch) continue;
    int64_t n = r.decoding() && r.remaining() == 1 ? 1 : std::min({r.remaining(), budget, chunk_cap});
    int64_t need = extra_pages(r, n, st.page_size);
    // Make room by preempting the youngest running requests not yet scheduled.
    for (size_t j = st.running.size(); need > free && j-- > i + 1;) {
      const sched_request& victim = st.running[j];
      if (preempted.count(victim.id)) continue;
      preempted.insert(victim.id);
      d.preempt.push_back(victim.id);
      free += victim.pages_held;
    }
    if (need > free) {
      if (r.decoding()) {  // nothing younger to evict: requeue this one
        preempted.insert(r.id);
        d.preempt.push_back(r.id);
        free += r.pages_held;
      }
      continue;
    }
    free -= need;
    budget -= n;
    d.items.push_back({r.id, n});
  }

  // Waiting requests strictly in arrival order; the first that does not fit stops admission.
  if (!d.preempt.empty()) return d;
  for (const sched_request& r : st.waiting) {
    if (budget <= 0 || static_cast<int64_t>(d.items.size()) >= s_.max_batch) break;
    int64_t n = std::min({r.remaining(), budget, chunk_cap});
    int64_t need = extra_pages(r, n, st.page_size);
    if (n <= 0 || need > free) break;
    free -= need;
    budget -= n;
    d.items.push_back({r.id, n});
  }
  return d;
}

}  // namespace tandem
