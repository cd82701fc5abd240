#pragma once
// runtime: a serving stack assembled from a pipeline file — plugins loaded, model opened
// and placed on the backend, KV pool sized, scheduler and transport created, tokenizer and
// chat template ready, engine waiting for requests.
//
//   auto rt = runtime::open("pipelines/default.yaml", {.overrides = {"scheduler.max_batch=4"}});
//   auto ids = rt->tokens_for_chat({{"user", "Hello"}});
//   rt->eng().submit({.prompt = ids, ...});
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/chat_template.hpp"
#include "tandem/device.hpp"
#include "tandem/engine.hpp"
#include "tandem/tokenizer.hpp"

namespace tandem {

struct pipeline_spec;

struct runtime_options {
  std::vector<std::string> overrides;  // "section.key=value"
  bool allow_pull = true;              // fetch a manifest model that is not cached yet
  std::function<void(std::string_view)> progress;  // status lines while loading
};

class runtime {
 public:
  // Loads and validates the pipeline, then builds everything. Throws config_error with every
  // diagnostic (one per line) for a bad pipeline, model_error / plugin_error otherwise.
  static std::unique_ptr<runtime> open(const std::filesystem::path& pipeline,
                                       const runtime_options& opt = {});
  ~runtime();

  engine& eng();
  const tokenizer& tok() const;
  const pipeline_spec& spec() const;
  const std::string& model_name() const;        // what the pipeline's model: says
  int64_t max_model_len() const;
  int64_t kv_pool_tokens() const;  // the KV pool's pages x page_size
  const std::vector<std::string>& summary() const;  // start-up lines: plugins, model, KV pool
  // Why the model's other ranks are lost (a worker died or stalled: a collective or the idle
  // heartbeat failed); empty while they serve, and always in a world of one. Any thread.
  std::string ranks_failure() const;
  // Bytes of weights one decode step reads (every tensor once; a tied LM head counts once).
  size_t weight_bytes_per_token() const;
  // Where the model runs (the backend's device).
  device model_device() const;

  // The prompt tokens of a conversation rendered with the model's chat template.
  std::vector<int32_t> tokens_for_chat(std::span<const chat_message> messages,
                                       bool add_generation_prompt = true) const;
  std::string render_chat(std::span<const chat_message> messages, bool add_generation_prompt = true) const;
  // The model's chat template (null when it has none), for callers that render with their
  // own options (the server's tools); bos / eos text as render_chat passes them.
  const chat_template* chat() const;

 private:
  runtime();
  struct impl;
  std::unique_ptr<impl> impl_;
};

}  // namespace tandem
