// Applying a scheduler decision. The decision is checked, not trusted: items for unknown
// requests, or beyond what a request has left, are dropped, and an item whose pages cannot
// be allocated is skipped this step.
#include <algorithm>
#include <cmath>
#include <unordered_set>

#include "engine_impl.hpp"

namespace tandem {

void engine::impl::refresh_waiting() {
  // Every step: what the cache holds changes as other requests publish and evict pages,
  // and schedulers classify waiting requests by it.
  for (auto& s : waiting) s->cached = std::max(s->computed, cache.lookup(s->kv, s->tokens));
}

void engine::impl::apply_pins(const sched_decision& d) {
  const std::unordered_set<uint64_t> want(d.pin.begin(), d.pin.end());
  const auto cap = static_cast<int64_t>(std::floor(p.cache.pin_share * static_cast<double>(pool.n_pages())));
  int64_t pinned = 0;
  for (auto& s : waiting) {
    if (want.count(s->id) || s->kv.pages.empty()) continue;
    cache.release(s->kv);  // no longer asked for: back to the LRU list
    s->computed = 0;
  }
  for (auto& s : waiting) pinned += static_cast<int64_t>(s->kv.pages.size());
  if (!cache.enabled()) return;
  for (auto& s : waiting) {
    if (!want.count(s->id)) continue;
    const int64_t more = (s->cached - s->computed) / pool.page_size();
    if (more <= 0 || pinned + more > cap) continue;
    s->computed = cache.attach(s->kv, s->tokens);
    pinned += more;
  }
}

bool engine::impl::unpin_all() {
  bool any = false;
  for (auto& s : waiting) {
    if (s->kv.pages.empty()) continue;
    cache.release(s->kv);
    s->computed = 0;
    any = true;
  }
  return any;
}

void engine::impl::note_policy(const sched_decision& d) {
  const std::unordered_set<uint64_t> held(d.held.begin(), d.held.end());
  for (auto& s : waiting) {
    const bool now_held = held.count(s->id) > 0;
    if (now_held && !s->held) ++st.hold_events;
    s->held = now_held;
  }
  st.aging_escapes += d.escaped.size();
  if (!d.capped.empty()) ++st.capped_steps;
}

void engine::impl::preempt(std::vector<seq_ptr>::iterator it) {
  sequence& s = **it;
  cache.release(s.kv);
  s.computed = 0;  // recompute prompt and output when readmitted (cached pages may survive)
  s.cached = 0;
  waiting.push_front(std::move(*it));
  running.erase(it);
  ++st.preemptions;
}

// Moves a waiting request to running with its cached prefix attached and room for the
// item's tokens; nullptr (and it stays waiting) when the pool cannot give the pages.
sequence* engine::impl::admit(std::deque<seq_ptr>::iterator it, const sched_item& item) {
  sequence& s = **it;
  s.computed = cache.attach(s.kv, s.tokens);
  const int64_t n = std::min(item.n_tokens, static_cast<int64_t>(s.tokens.size()) - s.computed);
  if (n < 1 || !pool.grow(s.kv.pages, s.computed + n)) return nullptr;
  st.prefix_queries += s.tokens.size();
  st.prefix_hits += static_cast<uint64_t>(s.computed);
  if (s.hit_tokens < 0) {
    s.hit_tokens = s.computed;
    const int64_t uncached = static_cast<int64_t>(s.tokens.size()) - s.computed;
    s.cls = item.cls != request_class::unknown ? item.cls
            : uncached <= p.cache.warm_tokens  ? request_class::warm
                                               : request_class::cold;
  }
  s.held = false;
  running.push_back(std::move(*it));
  waiting.erase(it);
  return running.back().get();
}

bool engine::impl::apply(const sched_decision& d, std::vector<sequence*>& scheduled,
                         std::vector<int64_t>& counts) {
  for (uint64_t id : d.preempt) {
    auto it = std::find_if(running.begin(), running.end(), [id](const seq_ptr& s) { return s->id == id; });
    if (it != running.end()) preempt(it);
  }
  // Attach every admitted request's cached prefix before any page is allocated, so one
  // admission's new pages cannot evict the hit another one was admitted for.
  for (const sched_item& item : d.items) {
    auto jt = std::find_if(waiting.begin(), waiting.end(), [&](const seq_ptr& s) { return s->id == item.id; });
    if (jt != waiting.end()) (*jt)->computed = cache.attach((*jt)->kv, (*jt)->tokens);
  }
  for (const sched_item& item : d.items) {
    auto match = [&](const seq_ptr& s) { return s->id == item.id; };
    sequence* s = nullptr;
    if (auto it = std::find_if(running.begin(), running.end(), match); it != running.end()) {
      s = it->get();
    } else if (auto jt = std::find_if(waiting.begin(), waiting.end(), match); jt != waiting.end()) {
      s = admit(jt, item);
    }
    if (!s || std::find(scheduled.begin(), scheduled.end(), s) != scheduled.end()) continue;
    const int64_t remaining = static_cast<int64_t>(s->tokens.size()) - s->computed;
    const int64_t n = std::min(item.n_tokens, remaining);
    if (n < 1 || !pool.grow(s->kv.pages, s->computed + n)) continue;
    if (s->first_scheduled_s < 0) s->first_scheduled_s = now();
    scheduled.push_back(s);
    counts.push_back(n);
  }
  return !scheduled.empty();
}

}  // namespace tandem
