#pragma once
// engine: continuous batching of generation requests over one model.
//
//   engine eng(model_parts...);
//   auto id = eng.submit({.prompt = ids, .max_new_tokens = 64, .on_event = print});
//   while (eng.has_work()) eng.step();
//
// submit() and cancel() may be called from any thread; step() runs on one engine thread,
// which is also where on_event callbacks run (keep them short: hand off, don't block).
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/sampling_params.hpp"
#include "tandem/scheduler.hpp"

namespace tandem {

class transport;
class model;
class kv_pool;
class drafter;
class compiled_grammar;

enum class finish_reason : uint8_t { none, stop, length, cancelled, error };
std::string_view name(finish_reason r);

// The log-probability of prompt token `position` given the tokens before it (position >= 1).
struct prompt_token_logprob {
  int64_t position = 0;
  float logprob = 0;
  std::vector<std::pair<int32_t, float>> top;  // most likely tokens there, best first
};

struct token_event {
  uint64_t request_id = 0;
  int32_t token = -1;            // -1 when the event only reports an end
  finish_reason finished = finish_reason::none;
  std::string error;             // set when finished == error
  float logprob = 0;             // log-probability of `token` (when logprobs >= 0 was asked)
  std::vector<std::pair<int32_t, float>> top_logprobs;  // most likely tokens, best first
  double queued_s = -1;          // first event only: seconds from submit to first scheduling
  request_class cls = request_class::unknown;  // first event only: class at admission
  int64_t cached_tokens = -1;    // first event only: prompt tokens taken from the prefix cache
  // prompt_logprobs >= 0: the prompt positions computed this step (token -1, finished none);
  // see prompt_logprobs.cpp.
  std::vector<prompt_token_logprob> prompt_logprobs;
};

struct generation_request {
  std::vector<int32_t> prompt;
  sampling_params sampling;
  int64_t max_new_tokens = 256;
  bool ignore_eos = false;
  std::vector<int32_t> stop_token_ids;   // in addition to the model's end-of-generation ids
  int32_t logprobs = -1;                 // -1 none; 0 the chosen token's; k also the top k
  float presence_penalty = 0;            // OpenAI semantics, over generated tokens
  float frequency_penalty = 0;
  std::vector<token_bias> logit_bias;    // OpenAI logit_bias, applied before sampling
  int32_t prompt_logprobs = -1;          // -1 none; k: every prompt token's logprob and top k
  std::string cache_salt;   // tenant isolation: only requests with the same salt share pages
  std::string session;      // conversation id: under session retention its chain stays cached
  // Structured output: every sampled token is one the grammar allows (tandem/grammar.hpp);
  // null = unconstrained.
  std::shared_ptr<const compiled_grammar> grammar;
  std::function<void(const token_event&)> on_event;
};

struct engine_stats {
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;     // prefill tokens computed
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;       // by the scheduler or, when nothing could run, the engine
  uint64_t prefix_queries = 0;    // tokens looked up in the prefix cache at admission
  uint64_t prefix_hits = 0;       // of those, tokens the cache supplied
  uint64_t hold_events = 0;       // waiting requests the scheduler started holding back
  uint64_t aging_escapes = 0;     // held requests admitted because they waited too long
  uint64_t capped_steps = 0;      // steps in which the scheduler capped a prefill chunk
  uint64_t pages_evicted = 0;     // cached pages reused for other content
  uint64_t cache_resets = 0;
  // Speculative decoding, with vLLM's meanings: drafts = sequences verified with at least
  // one draft token; accepted_per_pos[i] = drafts whose token i was accepted.
  uint64_t spec_drafts = 0;
  uint64_t spec_draft_tokens = 0;
  uint64_t spec_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
  // Wall seconds: every engine step, and of them the drafter's propose() and observe() calls
  // (what drafting costs beside the verify rows).
  double step_seconds = 0, spec_propose_seconds = 0, spec_observe_seconds = 0;
  // step_seconds by phase (step_trace.hpp's step_record): the whole of drafting (the adaptive
  // controller and the drafter's propose calls), model->forward (on a GPU: enqueueing the
  // step), sampling (on a GPU: waiting for the step), verification on the host (with any
  // logits copied back for host-side sampling) and handing committed rows to the drafter;
  // step_seconds less them is the rest (plan building, publishing pages, emitting events).
  double step_propose_seconds = 0, step_forward_seconds = 0, step_sample_seconds = 0, step_verify_seconds = 0,
         step_observe_seconds = 0;
  // Steps (and their wall seconds) by kind: decode, every scheduled sequence computes its one
  // new token and none drafts; draft, the same with at least one draft token; other, any
  // prompt chunk or recomputation in the step. decode + draft + other = steps, less any step
  // that failed (its requests then fail with an error).
  uint64_t decode_steps = 0, draft_steps = 0, other_steps = 0;
  double decode_step_seconds = 0, draft_step_seconds = 0, other_step_seconds = 0;
  size_t running = 0, waiting = 0;
  int64_t kv_pages_used = 0, kv_pages_cached = 0, kv_pages_total = 0;
};

// Session retention keeps a conversation's cached chain out of eviction for a while after
// its last request; lru is plain least-recently-used eviction.
enum class retention_policy : uint8_t { lru, session };

struct prefix_cache_settings {
  bool enabled = true;
  std::string hash = "xxhash";          // xxhash | sha256
  retention_policy retention = retention_policy::lru;
  double retention_s = 300;             // protection after a session's last request
  double retention_share = 0.5;         // most of the pool protection may hold
  int64_t warm_tokens = 3584;           // metrics class when the scheduler gives none
  double pin_share = 0.25;              // most of the pool held for waiting requests' prefixes
};

class engine {
 public:
  struct parts {
    tandem::model* model = nullptr;
    scheduler* sched = nullptr;
    transport* comm = nullptr;
    std::vector<int32_t> end_of_generation;  // token ids that finish a request
    int64_t max_model_len = 0;
    int64_t kv_pages = 0;
    int page_size = 16;
    prefix_cache_settings cache;
    // Speculative decoding: null = off. Each step, running decode sequences get up to
    // drafter->limits().max_draft draft tokens, verified in the same forward pass.
    tandem::drafter* drafter = nullptr;
  };
  explicit engine(parts p);
  ~engine();
  engine(const engine&) = delete;
  engine& operator=(const engine&) = delete;

  // Queues a request; returns its id. Requests that can never fit (prompt empty or longer
  // than max_model_len) finish at once with finish_reason::error.
  uint64_t submit(generation_request r);
  // Cancels a request; its pages are freed in the next step. Unknown ids are ignored.
  void cancel(uint64_t id);
  // Runs one step: schedule, compute, sample, emit events. False when there was nothing to do.
  bool step();
  bool has_work() const;
  // Forgets the prefix cache at the start of the next step (pages in use stay, unshared).
  // May be called from any thread.
  void reset_prefix_cache();
  // Blocks until a request or cancel arrives, or `timeout` passes (for an idle engine thread).
  void wait_for_work(std::chrono::milliseconds timeout);
  engine_stats stats() const;
  // Appends one JSON line per step to `path` from now on (serving/engine/step_trace.hpp);
  // "" stops. The TANDEM_SPEC_TRACE environment variable opens one when the engine starts.
  // Engine thread, between steps. Throws tandem::error when the file cannot be opened.
  void set_trace(const std::string& path);
  // The adaptive draft length forgets the acceptance it has seen (engine-wide rate, probe
  // interval) and keeps its step timings: a benchmark's warm-up requests time the steps
  // without their text deciding how the timed requests start drafting. Engine thread.
  void forget_draft_acceptance();
  // Throws tandem::error when the KV pool's bookkeeping is inconsistent (tests; engine thread).
  void check_invariants() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tandem
