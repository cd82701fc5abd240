#pragma once
// server: the OpenAI-compatible HTTP front end (Boost.Beast inside; no Boost here).
//
//   auto src = tandem::make_runtime_source("pipelines/default.yaml", {});  // loads in background
//   tandem::server srv(src, {.host = "127.0.0.1", .port = 8080});
//   uint16_t port = srv.start();            // listening; /health answers 503 until loaded
//   ...                                     // wait for a signal
//   srv.stop(std::chrono::seconds(10));     // stop accepting, drain or cancel, join threads
//
// Endpoints: POST /v1/chat/completions, POST /v1/completions, GET /v1/models, GET /health,
// GET /metrics (Prometheus text, prefix tandem:), POST /tokenize, POST /detokenize,
// GET /version. Errors use OpenAI's shape {"error": {"message", "type", "param", "code"}}.
// Chat requests take OpenAI's tools / tool_choice / parallel_tool_calls (the model's output
// parsed into tool_calls); completions take echo with prompt logprobs; both take logit_bias.
// Fields the server cannot honour are rejected with 400, never ignored.
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tandem/runtime.hpp"

namespace tandem {

class completion_source;  // what generates tokens: the runtime's engine, or a test double

struct server_options {
  std::string host = "127.0.0.1";
  uint16_t port = 8080;             // 0 = any free port (start() returns the one bound)
  int io_threads = 2;
  size_t body_limit = 8u << 20;     // bytes; a larger request body gets 413
  size_t max_pending = 256;         // engine requests in flight; more get 429
  // Bearer authentication: when set, /v1/* (and with auth_all every path, /health and
  // /metrics included) needs "Authorization: Bearer <api_key>", else 401.
  std::string api_key;
  bool auth_all = false;
  // CORS: origins allowed to call from a browser ("*" = any); empty = no CORS headers and
  // no preflight answers.
  std::vector<std::string> cors_origins;
  // Tool-call format of the model's output: "auto" (from the chat template), "hermes"
  // (<tool_call>{json}</tool_call>, SmolLM2 / Qwen) or "glm4" (GLM-4.5 / GLM-5).
  std::string tool_parser = "auto";
  // Open connections; one more is answered 503 and closed. 0 = from the descriptor limit
  // (RLIMIT_NOFILE less 64 for the model, plugins and logs). Running out of descriptors
  // anyway is survived: waiting connections get 503 until some close.
  size_t max_connections = 0;
  size_t header_limit = 64u << 10;  // bytes of request line + headers; more gets 414 / 431
  // Seconds a request line and headers may take to arrive (from the connection's start, or
  // from a keep-alive request's first byte); a client slower than that (slowloris) is
  // disconnected. The body then has 120 s.
  double header_timeout_s = 30;
};

// What the runtime source serves beyond its pipeline: the model name clients must send
// (empty = the pipeline's model:) and a chat template replacing the model's (its text).
struct source_options {
  std::string served_model_name;
  std::string chat_template;
};

class server {
 public:
  server(std::shared_ptr<completion_source> source, server_options opt);
  ~server();  // stop(0) if still running
  server(const server&) = delete;
  server& operator=(const server&) = delete;

  // Binds and starts the I/O threads. Returns the bound port. Throws tandem::error when the
  // address cannot be bound.
  uint16_t start();
  // Stops accepting, lets in-flight requests finish for up to `deadline`, cancels the rest,
  // and joins the I/O threads. Safe to call more than once.
  void stop(std::chrono::milliseconds deadline);
  // Engine requests in flight right now.
  size_t in_flight() const;

 private:
  struct impl;
  std::unique_ptr<impl> impl_;
};

// The real completion source: opens `pipeline` on a background thread (health is "loading"
// until it is ready, "dead" if opening fails or the engine thread dies), then runs the
// engine on its own thread.
std::shared_ptr<completion_source> make_runtime_source(std::string pipeline, runtime_options opt,
                                                      source_options so = {});

// Readiness of a source, as /health reports it.
enum class source_state : uint8_t { loading, ready, dead };
source_state state_of(const completion_source& s);
// The error that made a source dead (empty otherwise).
std::string failure_of(const completion_source& s);
// Start-up lines of a ready source (plugins, model, KV pool).
std::vector<std::string> summary_of(const completion_source& s);

}  // namespace tandem
