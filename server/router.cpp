#include "router.hpp"

#include <chrono>
#include <fmt/format.h>

#include "admission.hpp"
#include "api_error.hpp"
#include "job_builder.hpp"
#include "request.hpp"
#include "tandem/logger.hpp"

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif

namespace tandem::http {
namespace {

struct route_entry {
  std::string_view path;
  std::string_view method;
};

const route_entry routes[] = {
    {"/v1/chat/completions", "POST"}, {"/v1/completions", "POST"}, {"/v1/models", "GET"},
    {"/health", "GET"}, {"/v1/health", "GET"}, {"/metrics", "GET"}, {"/tokenize", "POST"},
    {"/detokenize", "POST"}, {"/version", "GET"}, {"/reset_prefix_cache", "POST"},
};

reply json_reply(const boost::json::value& v) { return {200, boost::json::serialize(v)}; }

// The tool-call format: the server's --tool-parser, or the one the chat template teaches.
tool_format tool_format_of(const server_context& ctx) {
  if (auto f = tool_format_named(ctx.opt.tool_parser)) return *f;
  return detect_tool_format(ctx.source->chat_template_source());
}

}  // namespace

void router::require_ready() const {
  if (ctx_.stopping) throw api_error(503, "the server is shutting down");
  switch (ctx_.source->state()) {
    case source_state::ready: return;
    case source_state::loading: throw api_error(503, "the model is still loading");
    case source_state::dead: throw api_error(503, "the engine is not running: " + ctx_.source->failure());
  }
}

route_result router::handle(std::string_view method, std::string_view target, std::string_view body,
                            const std::shared_ptr<response_sink>& sink, const boost::asio::any_io_executor& strand,
                            clock::time_point arrival, const request_meta& meta) {
  const std::string_view path = target.substr(0, target.find('?'));
  if (auto denied = check_access(ctx_.opt, method, path, meta)) {
    reply r{denied->status, std::move(denied->body)};
    r.headers = std::move(denied->headers);
    return {std::move(r), nullptr};
  }
  const route_entry* hit = nullptr;
  for (const auto& r : routes)
    if (r.path == path) hit = &r;
  try {
    if (!hit) throw not_found(fmt::format("no route {} {}", method, path));
    if (method != hit->method)
      throw api_error(405, fmt::format("{} expects {}, not {}", path, hit->method, method));
    if (path == "/v1/chat/completions") return {std::nullopt, generate(true, path, body, sink, strand, arrival)};
    if (path == "/v1/completions") return {std::nullopt, generate(false, path, body, sink, strand, arrival)};
    if (path == "/health" || path == "/v1/health") return {health(), nullptr};
    if (path == "/version") return {version(), nullptr};
    if (path == "/v1/models") return {models(), nullptr};
    if (path == "/metrics") return {metrics(), nullptr};
    if (path == "/tokenize") return {tokenize(body), nullptr};
    if (path == "/reset_prefix_cache") return {reset_prefix_cache(), nullptr};
    return {detokenize(body), nullptr};
  } catch (const api_error& e) {
    return {reply{e.status(), e.body()}, nullptr};
  } catch (const std::exception& e) {
    default_logger().error(fmt::format("{} {}: {}", method, path, e.what()));
    return {reply{500, error_body(500, e.what())}, nullptr};
  }
}

reply router::health() const {
  if (ctx_.stopping) return {503, error_body(503, "the server is shutting down")};
  switch (ctx_.source->state()) {
    case source_state::ready: {
      const std::string why = ctx_.source->unhealthy();
      if (!why.empty()) return {503, error_body(503, why)};
      return {200, R"({"status":"ok"})"};
    }
    case source_state::loading: return {503, error_body(503, "the model is still loading")};
    case source_state::dead: break;
  }
  return {503, error_body(503, "the engine is not running: " + ctx_.source->failure())};
}

reply router::version() const {
  boost::json::object o;
  o["version"] = TANDEM_VERSION;
  return json_reply(o);
}

reply router::models() const {
  require_ready();
  boost::json::object m;
  m["id"] = ctx_.source->model_name();
  m["object"] = "model";
  m["created"] = std::chrono::duration_cast<std::chrono::seconds>(std::chrono::system_clock::now().time_since_epoch()).count();
  m["owned_by"] = "tandem";
  m["root"] = ctx_.source->model_name();
  m["parent"] = nullptr;
  m["max_model_len"] = ctx_.source->max_model_len();
  boost::json::object o;
  o["object"] = "list";
  o["data"] = boost::json::array{m};
  return json_reply(o);
}

reply router::metrics() const {
  const bool ready = ctx_.source->state() == source_state::ready;
  const std::string model = ready ? ctx_.source->model_name() : std::string();
  return {200, ctx_.metrics.render(model, ready ? ctx_.source->stats() : source_stats{},
                                   {ctx_.connections.load(), ctx_.in_flight.load()}),
          "text/plain; version=0.0.4; charset=utf-8"};
}

reply router::reset_prefix_cache() const {
  require_ready();
  if (!ctx_.source->reset_prefix_cache()) throw api_error(501, "this engine has no prefix cache to reset");
  return {200, R"({"status":"ok"})"};
}

reply router::tokenize(std::string_view body) const {
  require_ready();
  const tokenize_request r = parse_tokenize_request(parse_json_body(body));
  std::vector<int32_t> ids;
  try {
    ids = r.prompt ? ctx_.source->encode(*r.prompt) : ctx_.source->chat_tokens(r.messages, {});
  } catch (const api_error&) {
    throw;
  } catch (const error& e) {
    throw bad_request(e.what(), r.prompt ? "prompt" : "messages");
  }
  boost::json::object o;
  o["tokens"] = boost::json::value_from(ids);
  o["count"] = ids.size();
  o["max_model_len"] = ctx_.source->max_model_len();
  return json_reply(o);
}

reply router::detokenize(std::string_view body) const {
  require_ready();
  const std::vector<int32_t> ids = parse_detokenize_request(parse_json_body(body));
  for (int32_t id : ids)
    if (id >= ctx_.source->vocab_size())
      throw bad_request(fmt::format("token id {} is outside the vocabulary ({} tokens)", id, ctx_.source->vocab_size()),
                        "tokens");
  boost::json::object o;
  o["prompt"] = ctx_.source->decode(ids);
  return json_reply(o);
}

std::shared_ptr<completion_job> router::generate(bool chat, std::string_view path, std::string_view body,
                                                 const std::shared_ptr<response_sink>& sink,
                                                 const boost::asio::any_io_executor& strand, clock::time_point arrival) {
  require_ready();
  const boost::json::value v = parse_json_body(body);
  job_spec spec = chat ? build_chat_job(*ctx_.source, parse_chat_request(v), tool_format_of(ctx_))
                       : build_completion_job(*ctx_.source, parse_completion_request(v));
  spec.route = std::string(path);
  check_admissible(*ctx_.source, spec, ctx_.opt.max_pending);  // 400 for what can never run
  const size_t want = spec.prompts.size() * static_cast<size_t>(spec.gen.n);
  if (ctx_.in_flight + want > ctx_.opt.max_pending)
    throw api_error(429, fmt::format("the server is at capacity ({} requests in flight); retry later",
                                     ctx_.in_flight.load()));
  auto job = std::make_shared<completion_job>(ctx_, sink, strand, std::move(spec), arrival);
  job->start();
  return job;
}

}  // namespace tandem::http
