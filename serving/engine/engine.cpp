#include "tandem/engine.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>

#include "engine_impl.hpp"
#include "prompt_logprobs.hpp"
#include "tandem/drafter.hpp"
#include "tandem/model.hpp"
#include "tandem/error.hpp"
#include "tandem/scheduler.hpp"

namespace tandem {

std::string_view name(finish_reason r) {
  switch (r) {
    case finish_reason::none:      return "none";
    case finish_reason::stop:      return "stop";
    case finish_reason::length:    return "length";
    case finish_reason::cancelled: return "cancelled";
    case finish_reason::error:     return "error";
  }
  return "?";
}

namespace {

prefix_cache::options cache_options(const prefix_cache_settings& s) {
  return {s.enabled, parse_hash_algo(s.hash)};
}

}  // namespace

engine::impl::impl(parts parts_)
    : p(std::move(parts_)),
      pool(p.kv_pages, p.page_size),
      cache(pool, cache_options(p.cache)),
      drafting(p.drafter && p.drafter->limits().adaptive) {
  if (p.drafter) draft_taps = p.drafter->target_layers();
  if (const char* path = std::getenv("TANDEM_SPEC_TRACE"); path && *path) {
    try {
      trace.open(path);
    } catch (const error& e) {
      throw error(std::string("TANDEM_SPEC_TRACE: ") + e.what());
    }
  }
  const prefix_cache_settings& c = p.cache;
  if (!(c.retention_share >= 0 && c.retention_share <= 1) || !(c.pin_share >= 0 && c.pin_share <= 1))
    throw config_error("engine.retention_share", "shares of the KV pool must lie in [0, 1]");
  if (!(c.retention_s >= 0)) throw config_error("engine.retention_s", "must not be negative");
  if (c.enabled && c.retention == retention_policy::session)
    pool.set_protection_cap(static_cast<int64_t>(std::floor(c.retention_share * static_cast<double>(pool.n_pages()))));
}

void engine::impl::emit(sequence& s, int32_t token, finish_reason why, std::string err) {
  token_event ev;
  ev.request_id = s.id;
  ev.token = token;
  ev.finished = why;
  ev.error = std::move(err);
  emit(s, std::move(ev));
}

void engine::impl::emit(sequence& s, token_event ev) {
  if (!s.req.on_event) return;
  if (s.generated <= 1 && ev.token >= 0 && s.first_scheduled_s >= 0) {
    ev.queued_s = s.first_scheduled_s - s.arrival_s;
    ev.cls = s.cls;
    ev.cached_tokens = s.hit_tokens;
  }
  try {
    s.req.on_event(ev);
  } catch (...) {
    // A failing consumer must not take the engine down; the request ends below.
  }
}

void engine::impl::finish(sequence& s, finish_reason why, std::string err) {
  cache.release(s.kv);
  release_draft_state(s);
  s.computed = 0;
  emit(s, -1, why, std::move(err));
}

void engine::impl::drain_inbox() {
  std::vector<seq_ptr> fresh;
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard lock(inbox_mu);
    fresh.swap(inbox);
    cancelled.swap(cancels);
    pending = 0;
  }
  if (reset_requested.exchange(false)) {
    pool.reset_cache();
    ++st.cache_resets;
  }
  for (auto& s : fresh) {
    if (s->prompt_len == 0) {
      finish(*s, finish_reason::error, "the prompt is empty");
    } else if (s->prompt_len >= p.max_model_len) {
      finish(*s, finish_reason::error,
             "the prompt has " + std::to_string(s->prompt_len) + " tokens; the context holds " +
                 std::to_string(p.max_model_len) + " (prompt + at least one generated token)");
    } else if (pool.pages_for(s->prompt_len + 1) > pool.n_pages()) {
      finish(*s, finish_reason::error, "the prompt does not fit in the KV pool");
    } else {
      s->req.max_new_tokens = std::clamp<int64_t>(s->req.max_new_tokens, 1, p.max_model_len - s->prompt_len);
      s->kv.salt = prefill_salt(s->id, s->req);  // prompt_logprobs.hpp
      waiting.push_back(std::move(s));
    }
  }
  for (uint64_t id : cancelled) {
    auto match = [id](const seq_ptr& s) { return s->id == id; };
    if (auto it = std::find_if(waiting.begin(), waiting.end(), match); it != waiting.end()) {
      finish(**it, finish_reason::cancelled);
      waiting.erase(it);
    } else if (auto jt = std::find_if(running.begin(), running.end(), match); jt != running.end()) {
      finish(**jt, finish_reason::cancelled);
      running.erase(jt);
    }
  }
}

sched_request engine::impl::view(const sequence& s) const {
  sched_request r;
  r.id = s.id;
  r.prompt_tokens = s.prompt_len;
  r.total_tokens = static_cast<int64_t>(s.tokens.size());
  r.computed_tokens = s.computed;
  r.cached_tokens = std::max(s.computed, s.cached);
  r.max_total_tokens = s.prompt_len + s.req.max_new_tokens;
  r.pages_held = static_cast<int64_t>(s.kv.pages.size());
  r.arrival_s = s.arrival_s;
  r.first_scheduled_s = s.first_scheduled_s;
  return r;
}

engine::engine(parts p) {
  if (!p.model || !p.sched) throw error("engine: a model and a scheduler are required");
  if (p.max_model_len <= 1) throw error("engine: max_model_len must be at least 2");
  impl_ = std::make_unique<impl>(std::move(p));
}

engine::~engine() = default;

uint64_t engine::submit(generation_request r) {
  auto s = std::make_unique<sequence>();
  s->id = impl_->next_id++;
  s->tokens = r.prompt;
  s->prompt_len = static_cast<int64_t>(r.prompt.size());
  s->arrival_s = impl_->now();
  s->req = std::move(r);
  const uint64_t id = s->id;
  std::lock_guard lock(impl_->inbox_mu);
  impl_->inbox.push_back(std::move(s));
  ++impl_->pending;
  impl_->inbox_cv.notify_one();
  return id;
}

void engine::cancel(uint64_t id) {
  std::lock_guard lock(impl_->inbox_mu);
  impl_->cancels.push_back(id);
  ++impl_->pending;
  impl_->inbox_cv.notify_one();
}

void engine::reset_prefix_cache() {
  impl_->reset_requested = true;
  std::lock_guard lock(impl_->inbox_mu);
  ++impl_->pending;
  impl_->inbox_cv.notify_one();
}

void engine::wait_for_work(std::chrono::milliseconds timeout) {
  std::unique_lock lock(impl_->inbox_mu);
  impl_->inbox_cv.wait_for(lock, timeout, [this] { return impl_->pending > 0; });
}

bool engine::has_work() const {
  return impl_->pending > 0 || !impl_->running.empty() || !impl_->waiting.empty();
}

bool engine::step() {
  impl& m = *impl_;
  m.drain_inbox();
  if (m.running.empty() && m.waiting.empty()) return false;
  m.pool.advance(m.now());
  m.refresh_waiting();

  std::vector<sched_request> run_views, wait_views;
  for (const auto& s : m.running) run_views.push_back(m.view(*s));
  for (const auto& s : m.waiting) wait_views.push_back(m.view(*s));
  sched_state state{run_views, wait_views, m.pool.available_pages(), m.pool.n_pages(),
                    m.pool.page_size(), m.now()};
  const sched_decision d = m.p.sched->schedule(state);
  m.note_policy(d);
  m.apply_pins(d);

  std::vector<sequence*> scheduled;
  std::vector<int64_t> counts;
  if (!m.apply(d, scheduled, counts)) {
    // Nothing could run. Free what waiting requests pin and try again; failing that,
    // preempt the youngest running request (recompute later) so the others can grow; with
    // nothing running, nothing will ever free pages: fail the oldest waiting request.
    if (!m.stalled && m.unpin_all()) {
      m.stalled = true;  // once: if that does not help either, fall through next time
      return true;
    }
    m.stalled = false;
    if (!m.running.empty()) {
      m.preempt(m.running.end() - 1);
    } else if (!m.waiting.empty()) {
      m.finish(*m.waiting.front(), finish_reason::error, "the scheduler could not admit the request");
      m.waiting.pop_front();
    }
    return true;
  }
  m.stalled = false;
  ++m.st.steps;
  try {
    m.run(scheduled, counts, d.draft_budget);
  } catch (const std::exception& e) {
    // A failed forward fails the requests of this step, not the engine.
    for (sequence* s : scheduled) {
      m.finish(*s, finish_reason::error, e.what());
      s->done = true;
    }
  }
  std::erase_if(m.running, [](const impl::seq_ptr& s) { return s->done; });
  return true;
}

engine_stats engine::stats() const {
  engine_stats s = impl_->st;
  s.running = impl_->running.size();
  s.waiting = impl_->waiting.size();
  s.kv_pages_total = impl_->pool.n_pages();
  s.kv_pages_used = impl_->pool.used_pages();
  s.kv_pages_cached = impl_->pool.cached_pages();
  s.pages_evicted = impl_->pool.evicted_pages();
  return s;
}

void engine::set_trace(const std::string& path) { impl_->trace.open(path); }

void engine::forget_draft_acceptance() { impl_->drafting.forget_acceptance(); }

void engine::check_invariants() const {
  const impl& m = *impl_;
  m.pool.check();
  int64_t refs = 0;
  for (int64_t p = 0; p < m.pool.n_pages(); ++p) refs += m.pool.ref_count(static_cast<int32_t>(p));
  int64_t held = 0;
  for (const auto& s : m.running) held += static_cast<int64_t>(s->kv.pages.size());
  for (const auto& s : m.waiting) held += static_cast<int64_t>(s->kv.pages.size());
  if (refs != held)
    throw error("engine invariant: " + std::to_string(refs) + " page references, sequences hold " +
                std::to_string(held));
}

}  // namespace tandem
