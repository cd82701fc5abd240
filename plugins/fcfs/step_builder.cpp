#include "step_builder.hpp"

#include <algorithm>

namespace tandem {

int64_t step_builder::extra_pages(const sched_request& r, int64_t n) const {
  const int64_t start = std::max(r.computed_tokens, r.cached_tokens);
  return std::max<int64_t>(0, scheduler::pages_for(start + n, st_.page_size) - r.pages_held);
}

bool step_builder::anyone_decoding(const sched_state& st) {
  return std::any_of(st.running.begin(), st.running.end(), decode_next);
}

int64_t step_builder::step_budget(const sched_state& st, int64_t per_step, int64_t lone) {
  return lone > per_step && !anyone_decoding(st) ? lone : per_step;
}

bool step_builder::scheduled(uint64_t id) const {
  return std::any_of(d_.items.begin(), d_.items.end(), [id](const sched_item& i) { return i.id == id; });
}

bool step_builder::decodes() {
  const auto& run = st_.running;
  for (size_t i = 0; i < run.size(); ++i) {
    const sched_request& r = run[i];
    if (!decode_next(r) || preempted(r.id) || full()) continue;
    const int64_t need = extra_pages(r, 1);
    // Make room by preempting the youngest running requests not scheduled yet.
    for (size_t j = run.size(); need > free_ && j-- > i + 1;) {
      if (preempted(run[j].id)) continue;
      preempted_.insert(run[j].id);
      d_.preempt.push_back(run[j].id);
      free_ += run[j].pages_held;
    }
    if (need > free_) {  // nothing younger to evict: requeue this one
      preempted_.insert(r.id);
      d_.preempt.push_back(r.id);
      free_ += r.pages_held;
      continue;
    }
    add(r, 1);
  }
  return d_.preempt.empty();
}

bool step_builder::add(const sched_request& r, int64_t n, request_class cls) {
  if (n <= 0 || full() || n > budget_) return false;
  const int64_t need = extra_pages(r, n);
  if (need > free_) return false;
  free_ -= need;
  budget_ -= n;
  d_.draft_budget = std::max<int64_t>(0, budget_);  // drafts get what the items leave
  d_.items.push_back({r.id, n, cls});
  return true;
}

int64_t step_builder::chunk(int64_t left, int64_t cap) const {
  int64_t n = std::min(left, budget_);
  if (cap > 0) n = std::min(n, cap);
  return n;
}

int64_t step_builder::align(const sched_request& r, int64_t n, int64_t left) const {
  if (n >= left) return n;
  const int64_t start = std::max(r.computed_tokens, r.cached_tokens);
  const int64_t end = (start + n) / st_.page_size * st_.page_size;
  return end > start ? end - start : n;
}

}  // namespace tandem
