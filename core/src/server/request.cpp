#include "request.hpp"

#include <fmt/format.h>

#include "api_error.hpp"
#include "json_fields.hpp"

namespace tandem::http {
namespace {

constexpr int64_t token_id_max = INT32_MAX;

void parse_sampling(const json_fields& f, gen_params& g) {
  if (auto v = f.number("temperature", 0, 2)) g.sampling.temperature = static_cast<float>(*v);
  if (auto v = f.number("top_p", 0, 1)) {
    if (*v <= 0) throw bad_request("'top_p' must be in (0, 1]", "top_p");
    g.sampling.top_p = static_cast<float>(*v);
  }
  // vLLM: -1 (or 0) disables top-k.
  if (auto v = f.integer("top_k", -1, INT32_MAX)) g.sampling.top_k = *v < 0 ? 0 : static_cast<int32_t>(*v);
  if (auto v = f.number("min_p", 0, 1)) g.sampling.min_p = static_cast<float>(*v);
  if (auto v = f.integer("seed", INT64_MIN, INT64_MAX)) {
    g.sampling.seed = static_cast<uint64_t>(*v);
    g.has_seed = true;
  }
  if (auto v = f.number("presence_penalty", -2, 2)) g.presence_penalty = static_cast<float>(*v);
  if (auto v = f.number("frequency_penalty", -2, 2)) g.frequency_penalty = static_cast<float>(*v);
}

void parse_stream(const json_fields& f, gen_params& g) {
  g.stream = f.boolean("stream").value_or(false);
  if (const auto* so = f.find("stream_options")) {
    if (!g.stream) throw bad_request("'stream_options' is only allowed when 'stream' is true", "stream_options");
    json_fields opts(*so, "stream_options");
    g.include_usage = opts.boolean("include_usage").value_or(false);
  }
}

void parse_stop(const json_fields& f, gen_params& g) {
  if (auto v = f.strings("stop")) {
    for (const auto& s : *v)
      if (s.empty()) throw bad_request("'stop' strings must not be empty", "stop");
    if (v->size() > 16) throw bad_request("'stop' holds at most 16 strings", "stop");
    g.stop = std::move(*v);
  }
  if (auto v = f.int_list("stop_token_ids", 0, token_id_max)) g.stop_token_ids = std::move(*v);
}

gen_params parse_common(const json_fields& f) {
  gen_params g;
  g.model = f.string("model").value_or("");
  parse_sampling(f, g);
  parse_stop(f, g);
  parse_stream(f, g);
  g.n = static_cast<int>(f.integer("n", 1, max_n).value_or(1));
  g.ignore_eos = f.boolean("ignore_eos").value_or(false);
  g.user = f.string("user").value_or("");
  // max_completion_tokens is the current chat field and wins over max_tokens (as in vLLM).
  g.max_tokens = f.integer("max_tokens", 1, INT32_MAX);
  if (auto v = f.integer("max_completion_tokens", 1, INT32_MAX)) g.max_tokens = v;
  return g;
}

std::string message_content(const json_fields& m) {
  const auto* c = m.find("content");
  if (!c) return {};  // null content: an assistant turn that only called tools
  if (c->is_string()) return std::string(c->get_string());
  const auto* parts = c->if_array();
  if (!parts) throw bad_request(fmt::format("'{}' must be a string or a list of content parts", m.param("content")), m.param("content"));
  std::string text;
  for (size_t i = 0; i < parts->size(); ++i) {
    json_fields part((*parts)[i], fmt::format("{}[{}]", m.param("content"), i));
    const auto type = part.string("type").value_or("");
    if (type != "text")
      throw bad_request(fmt::format("'{}' has type '{}'; only 'text' parts are supported", part.param("type"), type),
                        part.param("type"));
    auto t = part.string("text");
    if (!t) throw bad_request(fmt::format("'{}' is required", part.param("text")), part.param("text"));
    text += *t;
  }
  return text;
}

std::vector<chat_message> parse_messages(const json_fields& f) {
  const auto* v = f.find("messages");
  if (!v) throw bad_request("'messages' is required", "messages");
  const auto* arr = v->if_array();
  if (!arr) throw bad_request("'messages' must be a list", "messages");
  if (arr->empty()) throw bad_request("'messages' must not be empty", "messages");
  std::vector<chat_message> out;
  for (size_t i = 0; i < arr->size(); ++i) {
    json_fields m((*arr)[i], fmt::format("messages[{}]", i));
    auto role = m.string("role");
    if (!role) throw bad_request(fmt::format("'{}' is required", m.param("role")), m.param("role"));
    if (*role == "developer") role = "system";  // OpenAI's newer name for the system role
    if (*role != "system" && *role != "user" && *role != "assistant" && *role != "tool")
      throw bad_request(fmt::format("'{}' must be one of system, user, assistant, tool; got '{}'", m.param("role"), *role),
                        m.param("role"));
    chat_message msg{*role, message_content(m), m.string("name").value_or(""), m.string("tool_call_id").value_or("")};
    if (msg.role != "assistant" && !m.find("content"))
      throw bad_request(fmt::format("'{}' is required", m.param("content")), m.param("content"));
    out.push_back(std::move(msg));
  }
  return out;
}

prompt_input parse_prompt_item(const boost::json::value& v, size_t i) {
  if (v.is_string()) return std::string(v.get_string());
  if (const auto* ids = v.if_array()) {
    std::vector<int32_t> out;
    for (const auto& e : *ids) {
      auto id = as_integer(e);
      if (!id || *id < 0 || *id > token_id_max)
        throw bad_request(fmt::format("'prompt[{}]' must be a string or a list of token ids", i), "prompt");
      out.push_back(static_cast<int32_t>(*id));
    }
    return out;
  }
  throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists", "prompt");
}

std::vector<prompt_input> parse_prompts(const json_fields& f) {
  const auto* v = f.find("prompt");
  if (!v) throw bad_request("'prompt' is required", "prompt");
  if (v->is_string()) return {std::string(v->get_string())};
  const auto* arr = v->if_array();
  if (!arr) throw bad_request("'prompt' must be a string, a list of strings, a list of token ids or a list of such lists", "prompt");
  if (arr->empty()) throw bad_request("'prompt' must not be empty", "prompt");
  if (as_integer(arr->front()))  // a single prompt given as token ids
    return {parse_prompt_item(*v, 0)};
  std::vector<prompt_input> out;
  for (size_t i = 0; i < arr->size(); ++i) out.push_back(parse_prompt_item((*arr)[i], i));
  return out;
}

}  // namespace

boost::json::value parse_json_body(std::string_view body) {
  boost::system::error_code ec;
  boost::json::value v = boost::json::parse(body, ec);
  if (ec) throw bad_request(fmt::format("the body is not valid JSON: {}", ec.message()));
  return v;
}

chat_request parse_chat_request(const boost::json::value& body) {
  json_fields f(body, "");
  chat_request r;
  r.messages = parse_messages(f);
  r.gen = parse_common(f);
  if (f.boolean("logprobs").value_or(false)) r.gen.logprobs = 0;
  if (auto k = f.integer("top_logprobs", 0, max_top_logprobs)) {
    if (r.gen.logprobs < 0) throw bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
    r.gen.logprobs = static_cast<int32_t>(*k);
  }
  return r;
}

completion_request parse_completion_request(const boost::json::value& body) {
  json_fields f(body, "");
  completion_request r;
  r.prompts = parse_prompts(f);
  r.gen = parse_common(f);
  if (auto k = f.integer("logprobs", 0, max_top_logprobs)) r.gen.logprobs = static_cast<int32_t>(*k);
  if (f.boolean("echo").value_or(false)) throw bad_request("'echo' is not supported", "echo");
  if (f.find("suffix")) throw bad_request("'suffix' is not supported", "suffix");
  return r;
}

tokenize_request parse_tokenize_request(const boost::json::value& body) {
  json_fields f(body, "");
  tokenize_request r;
  r.prompt = f.string("prompt");
  if (!r.prompt) {
    if (!f.find("messages")) throw bad_request("'prompt' or 'messages' is required", "prompt");
    r.messages = parse_messages(f);
  }
  return r;
}

std::vector<int32_t> parse_detokenize_request(const boost::json::value& body) {
  json_fields f(body, "");
  auto ids = f.int_list("tokens", 0, token_id_max);
  if (!ids) throw bad_request("'tokens' is required", "tokens");
  return *ids;
}

}  // namespace tandem::http
