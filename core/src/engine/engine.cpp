#include "tandem/engine.hpp"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>

#include "llama_model.hpp"
#include "logit_processing.hpp"
#include "tandem/error.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/scheduler.hpp"
#include "tandem/step_plan.hpp"
#include "tandem/transport.hpp"

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

struct sequence {
  uint64_t id = 0;
  generation_request req;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t computed = 0;         // tokens whose KV is in the pool
  int64_t generated = 0;
  std::vector<int32_t> pages;
  double arrival_s = 0;
  double first_scheduled_s = -1;
};

}  // namespace

struct engine::impl {
  parts p;
  kv_pool pool;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::atomic<uint64_t> next_id{1};

  using seq_ptr = std::unique_ptr<sequence>;
  mutable std::mutex inbox_mu;
  std::condition_variable inbox_cv;
  std::vector<seq_ptr> inbox;
  std::vector<uint64_t> cancels;
  std::atomic<size_t> pending{0};

  std::deque<seq_ptr> waiting;   // arrival order (preempted requests go back to the front)
  std::vector<seq_ptr> running;  // admission order
  engine_stats st;
  uint64_t step_no = 0;

  explicit impl(parts parts_) : p(std::move(parts_)), pool(p.kv_pages, p.page_size) {}

  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  static void emit(sequence& s, int32_t token, finish_reason why, std::string err = {}) {
    token_event ev;
    ev.request_id = s.id;
    ev.token = token;
    ev.finished = why;
    ev.error = std::move(err);
    emit(s, std::move(ev));
  }

  static void emit(sequence& s, token_event ev) {
    if (!s.req.on_event) return;
    if (s.generated <= 1 && ev.token >= 0 && s.first_scheduled_s >= 0) ev.queued_s = s.first_scheduled_s - s.arrival_s;
    try {
      s.req.on_event(ev);
    } catch (...) {
      // A failing consumer must not take the engine down; the request ends below.
    }
  }

  void finish(sequence& s, finish_reason why, std::string err = {}) {
    if (!s.pages.empty()) pool.release(s.pages);
    emit(s, -1, why, std::move(err));
  }

  void drain_inbox();
  sched_request view(const sequence& s) const;
  bool apply(const sched_decision& d, std::vector<sequence*>& scheduled, std::vector<int64_t>& counts);
  void run(std::vector<sequence*>& scheduled, const std::vector<int64_t>& counts);
  bool is_stop(const sequence& s, int32_t tok) const;
};

void engine::impl::drain_inbox() {
  std::vector<seq_ptr> fresh;
  std::vector<uint64_t> cancelled;
  {
    std::lock_guard lock(inbox_mu);
    fresh.swap(inbox);
    cancelled.swap(cancels);
    pending = 0;
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
  r.cached_tokens = 0;
  r.max_total_tokens = s.prompt_len + s.req.max_new_tokens;
  r.pages_held = static_cast<int64_t>(s.pages.size());
  r.arrival_s = s.arrival_s;
  r.first_scheduled_s = s.first_scheduled_s;
  return r;
}

// Applies a scheduler decision to the queues and the pool. The decision is checked, not
// trusted: items for unknown requests, or beyond what a request has left, are dropped,
// and an item whose pages cannot be allocated is skipped this step.
bool engine::impl::apply(const sched_decision& d, std::vector<sequence*>& scheduled,
                         std::vector<int64_t>& counts) {
  for (uint64_t id : d.preempt) {
    auto it = std::find_if(running.begin(), running.end(), [id](const seq_ptr& s) { return s->id == id; });
    if (it == running.end()) continue;
    pool.release((*it)->pages);
    (*it)->computed = 0;  // recompute prompt and output when readmitted
    waiting.push_front(std::move(*it));
    running.erase(it);
    ++st.preemptions;
  }
  for (const sched_item& item : d.items) {
    auto match = [&](const seq_ptr& s) { return s->id == item.id; };
    sequence* s = nullptr;
    if (auto it = std::find_if(running.begin(), running.end(), match); it != running.end()) {
      s = it->get();
    } else if (auto jt = std::find_if(waiting.begin(), waiting.end(), match); jt != waiting.end()) {
      if (item.n_tokens < 1 || !pool.grow((*jt)->pages, (*jt)->computed + item.n_tokens)) continue;
      running.push_back(std::move(*jt));
      waiting.erase(jt);
      s = running.back().get();
    }
    if (!s || std::find(scheduled.begin(), scheduled.end(), s) != scheduled.end()) continue;
    const int64_t remaining = static_cast<int64_t>(s->tokens.size()) - s->computed;
    const int64_t n = std::min(item.n_tokens, remaining);
    if (n < 1 || !pool.grow(s->pages, s->computed + n)) continue;
    if (s->first_scheduled_s < 0) s->first_scheduled_s = now();
    scheduled.push_back(s);
    counts.push_back(n);
  }
  return !scheduled.empty();
}

bool engine::impl::is_stop(const sequence& s, int32_t tok) const {
  const auto& extra = s.req.stop_token_ids;
  if (std::find(extra.begin(), extra.end(), tok) != extra.end()) return true;
  if (s.req.ignore_eos) return false;
  const auto& eog = p.end_of_generation;
  return std::find(eog.begin(), eog.end(), tok) != eog.end();
}

void engine::impl::run(std::vector<sequence*>& scheduled, const std::vector<int64_t>& counts) {
  step_plan plan;
  plan.step = ++step_no;
  std::vector<sampling_params> params;
  std::vector<sequence*> samplers;
  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    step_seq q;
    q.request_id = s.id;
    q.start_pos = s.computed;
    q.tokens.assign(s.tokens.begin() + s.computed, s.tokens.begin() + s.computed + counts[i]);
    q.pages = s.pages;
    q.sample = s.computed + counts[i] == static_cast<int64_t>(s.tokens.size());
    q.sampling = s.req.sampling;
    q.sampling.step = static_cast<uint64_t>(s.generated);
    if (q.sample) {
      params.push_back(q.sampling);
      samplers.push_back(&s);
    }
    plan.seqs.push_back(std::move(q));
  }
  if (p.comm && p.comm->world_size() > 1) {
    std::vector<uint8_t> bytes = encode(plan);
    p.comm->broadcast(bytes, 0);
  }
  p.model->forward(plan);
  std::vector<int32_t> ids = p.model->sample(params);
  std::vector<token_event> events(samplers.size());
  if (std::any_of(samplers.begin(), samplers.end(), [](sequence* s) { return needs_host_logits(s->req); })) {
    const std::vector<float> logits = p.model->logits_to_host();
    const int vocab = p.model->hparams().vocab;
    for (size_t j = 0; j < samplers.size(); ++j) {
      const sequence& s = *samplers[j];
      if (!needs_host_logits(s.req)) continue;
      const float* row = logits.data() + j * static_cast<size_t>(vocab);
      std::span<const int32_t> out(s.tokens.data() + s.prompt_len, s.tokens.size() - s.prompt_len);
      if (has_penalties(s.req)) ids[j] = sample_with_penalties(row, vocab, s.req, params[j], out);
      if (s.req.logprobs >= 0) fill_logprobs(row, vocab, ids[j], s.req.logprobs, events[j]);
    }
  }

  for (size_t i = 0; i < scheduled.size(); ++i) {
    sequence& s = *scheduled[i];
    st.prompt_tokens += static_cast<uint64_t>(std::max<int64_t>(0, std::min(s.prompt_len, s.computed + counts[i]) - s.computed));
    s.computed += counts[i];
  }
  for (size_t j = 0; j < samplers.size(); ++j) {
    sequence& s = *samplers[j];
    const int32_t tok = ids[j];
    s.tokens.push_back(tok);
    ++s.generated;
    ++st.generated_tokens;
    finish_reason why = finish_reason::none;
    if (is_stop(s, tok)) why = finish_reason::stop;
    else if (s.generated >= s.req.max_new_tokens ||
             static_cast<int64_t>(s.tokens.size()) >= p.max_model_len) why = finish_reason::length;
    events[j].request_id = s.id;
    events[j].token = tok;
    events[j].finished = why;
    emit(s, std::move(events[j]));
    if (why != finish_reason::none) {
      pool.release(s.pages);
      s.id = 0;  // marks it for removal below
    }
  }
  std::erase_if(running, [](const seq_ptr& s) { return s->id == 0; });
}

engine::engine(parts p) : impl_(std::make_unique<impl>(std::move(p))) {
  if (!impl_->p.model || !impl_->p.sched) throw error("engine: a model and a scheduler are required");
  if (impl_->p.max_model_len <= 1) throw error("engine: max_model_len must be at least 2");
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

  std::vector<sched_request> run_views, wait_views;
  for (const auto& s : m.running) run_views.push_back(m.view(*s));
  for (const auto& s : m.waiting) wait_views.push_back(m.view(*s));
  sched_state state{run_views, wait_views, m.pool.free_pages(), m.pool.n_pages(),
                    m.pool.page_size(), m.now()};
  sched_decision d = m.p.sched->schedule(state);

  std::vector<sequence*> scheduled;
  std::vector<int64_t> counts;
  if (!m.apply(d, scheduled, counts)) {
    // Nothing could run. With nothing running, nothing will ever free pages: fail the
    // oldest waiting request rather than spin.
    if (m.running.empty() && !m.waiting.empty()) {
      m.finish(*m.waiting.front(), finish_reason::error, "the scheduler could not admit the request");
      m.waiting.pop_front();
    }
    return true;
  }
  ++m.st.steps;
  try {
    m.run(scheduled, counts);
  } catch (const std::exception& e) {
    // A failed forward fails the requests of this step, not the engine.
    for (sequence* s : scheduled) {
      m.finish(*s, finish_reason::error, e.what());
      s->id = 0;
    }
    std::erase_if(m.running, [](const impl::seq_ptr& s) { return s->id == 0; });
  }
  return true;
}

engine_stats engine::stats() const {
  engine_stats s = impl_->st;
  s.running = impl_->running.size();
  s.waiting = impl_->waiting.size();
  s.kv_pages_total = impl_->pool.n_pages();
  s.kv_pages_used = impl_->pool.used_pages();
  return s;
}

}  // namespace tandem
