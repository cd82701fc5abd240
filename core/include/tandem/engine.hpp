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

namespace tandem {

class scheduler;
class transport;
class llama_model;
class kv_pool;

enum class finish_reason : uint8_t { none, stop, length, cancelled, error };
std::string_view name(finish_reason r);

struct token_event {
  uint64_t request_id = 0;
  int32_t token = -1;            // -1 when the event only reports an end
  finish_reason finished = finish_reason::none;
  std::string error;             // set when finished == error
  float logprob = 0;             // log-probability of `token` (when logprobs >= 0 was asked)
  std::vector<std::pair<int32_t, float>> top_logprobs;  // most likely tokens, best first
  double queued_s = -1;          // first event only: seconds from submit to first scheduling
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
  std::function<void(const token_event&)> on_event;
};

struct engine_stats {
  uint64_t steps = 0;
  uint64_t prompt_tokens = 0;     // prefill tokens computed
  uint64_t generated_tokens = 0;
  uint64_t preemptions = 0;
  size_t running = 0, waiting = 0;
  int64_t kv_pages_used = 0, kv_pages_total = 0;
};

class engine {
 public:
  struct parts {
    llama_model* model = nullptr;
    scheduler* sched = nullptr;
    transport* comm = nullptr;
    std::vector<int32_t> end_of_generation;  // token ids that finish a request
    int64_t max_model_len = 0;
    int64_t kv_pages = 0;
    int page_size = 16;
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
  // Blocks until a request or cancel arrives, or `timeout` passes (for an idle engine thread).
  void wait_for_work(std::chrono::milliseconds timeout);
  engine_stats stats() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tandem
