#pragma once
// The engine's state, shared by engine.cpp (queues, public API), engine_apply.cpp (checking
// and applying a scheduler decision, prefix pins, preemption) and engine_run.cpp (one forward
// pass, sampling, events). Engine-thread only, except the inbox.
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <memory>
#include <mutex>
#include <unordered_set>
#include <vector>

#include "prefix_cache.hpp"
#include "spec_control.hpp"
#include "step_trace.hpp"
#include "tandem/engine.hpp"
#include "tandem/grammar.hpp"
#include "tandem/kv_pool.hpp"
#include "tandem/step_plan.hpp"

namespace tandem {

struct sequence {
  uint64_t id = 0;
  generation_request req;
  std::vector<int32_t> tokens;  // prompt, then generated tokens
  int64_t prompt_len = 0;
  int64_t computed = 0;         // tokens whose KV is in the pool (pages in kv.pages)
  int64_t generated = 0;
  cache_seq kv;
  int64_t cached = 0;           // waiting: prefix the cache would supply now
  double arrival_s = 0;
  double first_scheduled_s = -1;
  request_class cls = request_class::unknown;
  int64_t hit_tokens = -1;      // cached tokens at first admission
  bool held = false;            // the scheduler is holding it back
  bool done = false;            // finished this step; removed from running
  std::unique_ptr<grammar_matcher> matcher;  // req.grammar's state after the generated tokens
  draft_state draft;            // its acceptance so far, for the adaptive draft length
};

struct engine::impl {
  parts p;
  kv_pool pool;
  prefix_cache cache;
  std::chrono::steady_clock::time_point t0 = std::chrono::steady_clock::now();
  std::atomic<uint64_t> next_id{1};

  using seq_ptr = std::unique_ptr<sequence>;
  mutable std::mutex inbox_mu;
  std::condition_variable inbox_cv;
  std::vector<seq_ptr> inbox;
  std::vector<uint64_t> cancels;
  std::atomic<size_t> pending{0};
  std::atomic<bool> reset_requested{false};

  std::deque<seq_ptr> waiting;   // arrival order (preempted requests go back to the front)
  std::vector<seq_ptr> running;  // admission order
  engine_stats st;
  uint64_t step_no = 0;
  bool stalled = false;          // the last step ran nothing and released pins
  double spec_logged_s = 0;      // when log_speculation last wrote its line
  engine_stats spec_logged;      // the speculation counters it wrote then
  draft_controller drafting;     // draft lengths from acceptance and measured step times
  int64_t step_eligible = 0, step_asked = 0;  // this step: sequences that may draft, draft tokens asked for
  std::vector<int> draft_taps;   // target layers the drafter reads (drafter::target_layers)
  step_trace trace;              // one JSON line per step, when open (step_trace.hpp)

  explicit impl(parts parts_);

  double now() const {
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  static void emit(sequence& s, token_event ev);
  static void emit(sequence& s, int32_t token, finish_reason why, std::string err = {});
  void finish(sequence& s, finish_reason why, std::string err = {});
  void drain_inbox();
  sched_request view(const sequence& s) const;

  // engine_apply.cpp
  void refresh_waiting();
  void apply_pins(const sched_decision& d);
  bool unpin_all();
  void note_policy(const sched_decision& d);
  void preempt(std::vector<seq_ptr>::iterator it);
  bool apply(const sched_decision& d, std::vector<sequence*>& scheduled, std::vector<int64_t>& counts);
  sequence* admit(std::deque<seq_ptr>::iterator it, const sched_item& item);

  // engine_run.cpp
  // draft_budget: most draft tokens the step may add (the scheduler's budget left; -1 = no limit).
  void run(std::vector<sequence*>& scheduled, const std::vector<int64_t>& counts, int64_t draft_budget);
  // Adds a finished step to the stats, the cost model (decode and draft steps only) and the trace.
  void account(const step_record& r);
  void retire(sequence& s);
  bool is_stop(const sequence& s, int32_t tok) const;
  // s computes `count` tokens this step and they are only its last sampled one (no prompt
  // chunk, no recomputation after preemption): a decode step's sequence, the one kind that drafts.
  static bool decodes(const sequence& s, int64_t count) {
    return count == 1 && s.generated > 0 && s.computed + 1 == static_cast<int64_t>(s.tokens.size());
  }

  // speculation.cpp
  // What verification left of one sampled sequence's logits rows: the tokens to emit (the
  // accepted draft prefix, then the target's own token), each with its event's logprobs.
  struct verdict {
    std::vector<int32_t> tokens;
    std::vector<token_event> events;  // parallel to tokens
    int proposed = 0, accepted = 0;
  };
  std::vector<std::vector<int32_t>> propose_drafts(const std::vector<sequence*>& scheduled,
                                                   const std::vector<int64_t>& counts, int64_t draft_budget);
  std::vector<verdict> verify(const std::vector<sequence*>& samplers,
                              const std::vector<const std::vector<int32_t>*>& drafts,
                              const std::vector<sampling_params>& params, const std::vector<int32_t>& ids);
  void keep_accepted(sequence& s, int64_t accepted_kept);
  void note_verdict(sequence& s, const verdict& v);
  void release_draft_state(const sequence& s);
  // Hands the drafter the target's states of the rows each sequence committed this step.
  void observe_committed(const step_plan& plan, const std::vector<sequence*>& scheduled,
                         const std::vector<int64_t>& start, const std::vector<int64_t>& committed);
  void log_speculation();

  // prompt_logprobs.cpp
  bool computes_prompt_rows(const std::vector<sequence*>& scheduled) const;
  std::vector<int32_t> sample_all_rows(const std::vector<sequence*>& scheduled, const std::vector<int64_t>& counts,
                                       const std::vector<sampling_params>& params, std::vector<token_event>& events);
};

}  // namespace tandem
