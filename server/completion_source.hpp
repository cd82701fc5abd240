#pragma once
// completion_source: what the HTTP layer needs from a model — tokens in, token events out.
// The real one (runtime_source.cpp) wraps a runtime and runs its engine on one thread; the
// HTTP unit tests drive the server with a scripted one.
//
// Contract: submit() and cancel() may be called from any thread; on_event callbacks run on
// the source's generation thread and must only hand work off (asio::post), never block.
// Every submitted request gets exactly one event with finished != none, its last.
#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/chat_template.hpp"
#include "tandem/engine.hpp"
#include "tandem/grammar.hpp"
#include "tandem/server.hpp"

namespace tandem {

// Incremental detokenizer: push() returns only complete UTF-8; flush() the rest.
class text_decoder {
 public:
  virtual ~text_decoder() = default;
  virtual std::string push(int32_t id) = 0;
  virtual std::string flush() = 0;
};

struct source_stats {
  size_t running = 0, waiting = 0;
  uint64_t preemptions = 0;
  double kv_usage = 0;  // 0..1
  // Prefix cache and scheduling policy (engine_stats).
  uint64_t prefix_queries = 0, prefix_hits = 0;
  uint64_t hold_events = 0, aging_escapes = 0, capped_steps = 0, pages_evicted = 0;
  double kv_cached = 0;  // 0..1: unreferenced pages kept for reuse
  // Speculative decoding (engine_stats' spec_* counters).
  uint64_t spec_drafts = 0, spec_draft_tokens = 0, spec_accepted_tokens = 0;
  std::vector<uint64_t> spec_accepted_per_pos;
};

class completion_source {
 public:
  virtual ~completion_source() = default;

  virtual source_state state() const = 0;
  virtual std::string failure() const { return {}; }
  // Why a ready source can no longer serve (the model's other ranks are lost); empty while
  // it can. /health answers 503 with it.
  virtual std::string unhealthy() const { return {}; }
  virtual std::vector<std::string> summary() const { return {}; }

  // Valid once state() is ready.
  virtual const std::string& model_name() const = 0;
  virtual int64_t max_model_len() const = 0;
  // Tokens the KV pool holds (0 = unknown): a sequence longer than this can never run.
  virtual int64_t kv_pool_tokens() const { return 0; }
  virtual int32_t vocab_size() const = 0;
  // Plain text → ids (special tokens parsed; BOS added when the model asks for it).
  virtual std::vector<int32_t> encode(std::string_view text) const = 0;
  // The prompt of a conversation rendered with the chat template; tools_json (a JSON array,
  // empty = none) is the template's `tools`. Throws tandem::error (e.g. chat_template_error)
  // when the template rejects the conversation.
  virtual std::vector<int32_t> chat_tokens(std::span<const chat_message> messages,
                                           const std::string& tools_json) const = 0;
  // The chat template's text (empty: none), for detecting its tool-call format.
  virtual std::string chat_template_source() const { return {}; }
  // True when the template puts `tools` into the prompt (probed once at load); otherwise
  // the server writes the tools into the conversation itself (tool_prompt.hpp).
  virtual bool template_renders_tools() const { return false; }
  // Text of ids; throws tandem::error for an id out of range.
  virtual std::string decode(std::span<const int32_t> ids) const = 0;
  // Raw bytes of one token (for logprobs' "token" and "bytes").
  virtual std::string token_bytes(int32_t id) const = 0;
  // skip_special = false keeps special tokens in the text (tool-call markers are special
  // tokens in some vocabularies, GLM's among them).
  virtual std::unique_ptr<text_decoder> decoder(bool skip_special = true) const = 0;

  // The compiler of structured-output grammars over this model's vocabulary (made on first
  // use; thread-safe); null when the source cannot constrain its output.
  virtual const grammar_compiler* grammar() const { return nullptr; }

  virtual uint64_t submit(generation_request r) = 0;
  virtual void cancel(uint64_t id) = 0;
  virtual source_stats stats() const = 0;
  // Forgets the prefix cache (applied before the engine's next step); false when the
  // source has none.
  virtual bool reset_prefix_cache() { return false; }
  // Stops the generation thread and drops pending requests (their callbacks hold handlers
  // bound to the server's io_context, which must not outlive it). Nothing may be called after.
  virtual void shutdown() = 0;
};

}  // namespace tandem
