#include "request.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <span>

#include "api_error.hpp"
#include "json_fields.hpp"

namespace tandem::http {
namespace {

constexpr int64_t token_id_max = INT32_MAX;

// The fields each endpoint reads. Anything else is refused by name, so a client never
// believes a setting took effect when it did not.
constexpr std::string_view common_fields[] = {
    "model", "temperature", "top_p", "top_k", "min_p", "seed", "presence_penalty", "frequency_penalty", "stop",
    "stop_token_ids", "stream", "stream_options", "n", "ignore_eos", "user", "max_tokens", "logit_bias", "logprobs",
};
constexpr std::string_view chat_fields[] = {
    "messages", "max_completion_tokens", "top_logprobs", "tools", "tool_choice", "parallel_tool_calls",
    "response_format", "store",
};
constexpr std::string_view completion_fields[] = {"prompt", "echo"};

void reject_unknown(const boost::json::value& body, std::span<const std::string_view> own) {
  const auto* obj = body.if_object();
  if (!obj) return;  // json_fields reports it
  for (const auto& [k, v] : *obj) {
    const std::string_view key = k;
    auto known = [&](std::span<const std::string_view> list) { return std::find(list.begin(), list.end(), key) != list.end(); };
    if (!known(common_fields) && !known(own))
      throw bad_request(fmt::format("'{}' is not supported by this server", key), std::string(key));
  }
}

// OpenAI: a map from token id (as a string) to a bias in [-100, 100].
std::vector<token_bias> parse_logit_bias(const json_fields& f) {
  const auto* v = f.find("logit_bias");
  if (!v) return {};
  const auto* obj = v->if_object();
  if (!obj) throw bad_request("'logit_bias' must be an object mapping token ids to biases", "logit_bias");
  std::vector<token_bias> out;
  for (const auto& [k, b] : *obj) {
    const std::string key(k);
    size_t used = 0;
    long long id = -1;
    try {
      id = std::stoll(key, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used != key.size() || key.empty() || !std::isdigit(static_cast<unsigned char>(key[0])) || id > token_id_max)
      throw bad_request(fmt::format("'logit_bias' keys must be token ids; got '{}'", key), "logit_bias");
    if (!b.is_number() || b.is_bool())
      throw bad_request(fmt::format("'logit_bias[{}]' must be a number", key), "logit_bias");
    const double bias = b.to_number<double>();
    if (!(bias >= -max_logit_bias && bias <= max_logit_bias))
      throw bad_request(fmt::format("'logit_bias[{}]' must be between -100 and 100, got {}", key, bias), "logit_bias");
    out.push_back({static_cast<int32_t>(id), static_cast<float>(bias)});
  }
  return out;
}

void reject_keys_but(const boost::json::object& o, std::initializer_list<std::string_view> own, const std::string& path) {
  for (const auto& [k, v] : o)
    if (std::find(own.begin(), own.end(), std::string_view(k)) == own.end())
      throw bad_request(fmt::format("'{}.{}' is not supported by this server", path, std::string_view(k)),
                        fmt::format("{}.{}", path, std::string_view(k)));
}

// OpenAI's response_format: text, json_object (any JSON object) or json_schema {name,
// description, schema, strict}. The schema itself is compiled by job_builder, which turns
// what xgrammar refuses into a 400 naming response_format.json_schema.schema.
std::optional<grammar_spec> parse_response_format(const json_fields& f) {
  const auto* v = f.find("response_format");
  if (!v) return std::nullopt;
  if (!v->is_object()) throw bad_request("'response_format' must be an object", "response_format");
  json_fields rf(*v, "response_format");
  const auto type = rf.string("type");
  if (!type) throw bad_request("'response_format.type' is required", "response_format.type");
  if (*type == "text" || *type == "json_object") {
    reject_keys_but(v->get_object(), {"type"}, "response_format");
    if (*type == "text") return std::nullopt;
    return grammar_spec::json_object();
  }
  if (*type != "json_schema")
    throw bad_request(fmt::format("'response_format.type' must be text, json_object or json_schema; got '{}'", *type),
                      "response_format.type");
  reject_keys_but(v->get_object(), {"type", "json_schema"}, "response_format");
  const auto* js = rf.find("json_schema");
  if (!js || !js->is_object())
    throw bad_request("'response_format.json_schema' must be an object with 'name' and 'schema'", "response_format.json_schema");
  reject_keys_but(js->get_object(), {"name", "description", "schema", "strict"}, "response_format.json_schema");
  json_fields jf(*js, "response_format.json_schema");
  const auto name = jf.string("name");
  // OpenAI: a-z, A-Z, 0-9, underscores and dashes, at most 64 characters.
  const bool name_ok = name && !name->empty() && name->size() <= 64 &&
                       std::all_of(name->begin(), name->end(), [](char c) {
                         return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
                       });
  if (!name_ok)
    throw bad_request("'response_format.json_schema.name' is required: 1 to 64 of a-z, A-Z, 0-9, _ and -",
                      "response_format.json_schema.name");
  (void)jf.string("description");  // type-checked; it only documents the schema
  // strict true or false: the output always follows the schema (constrained decoding is
  // never best-effort here), which is what strict promises.
  (void)jf.boolean("strict");
  const auto* schema = jf.find("schema");
  if (!schema || !(schema->is_object() || schema->is_bool()))
    throw bad_request("'response_format.json_schema.schema' must be a JSON Schema object", "response_format.json_schema.schema");
  return grammar_spec::json_schema(boost::json::serialize(*schema));
}

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
  // tandem's extension: false turns speculative decoding off for this request.
  if (auto v = f.boolean("speculative")) g.sampling.speculative = *v;
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

// min_max_tokens: 0 where a request may generate nothing (completions with echo).
gen_params parse_common(const json_fields& f, int64_t min_max_tokens = 1) {
  gen_params g;
  g.model = f.string("model").value_or("");
  parse_sampling(f, g);
  parse_stop(f, g);
  parse_stream(f, g);
  g.n = static_cast<int>(f.integer("n", 1, max_n).value_or(1));
  g.ignore_eos = f.boolean("ignore_eos").value_or(false);
  g.user = f.string("user").value_or("");
  g.logit_bias = parse_logit_bias(f);
  // max_completion_tokens is the current chat field and wins over max_tokens (as in vLLM).
  g.max_tokens = f.integer("max_tokens", min_max_tokens, INT32_MAX);
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
    if (m.find("tool_calls") && msg.role != "assistant")
      throw bad_request(fmt::format("'{}' is only allowed on assistant messages", m.param("tool_calls")), m.param("tool_calls"));
    msg.tool_calls_json = parse_history_tool_calls(m);
    if (msg.role == "tool" && msg.tool_call_id.empty())
      throw bad_request(fmt::format("'{}' is required on tool messages", m.param("tool_call_id")), m.param("tool_call_id"));
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
  reject_unknown(body, chat_fields);
  chat_request r;
  r.messages = parse_messages(f);
  r.gen = parse_common(f);
  r.tools = parse_tools(f);
  r.gen.response_format = parse_response_format(f);
  if (f.boolean("store").value_or(false))
    throw bad_request("'store' true is not supported: this server keeps no completions", "store");
  if (f.boolean("logprobs").value_or(false)) r.gen.logprobs = 0;
  if (auto k = f.integer("top_logprobs", 0, max_top_logprobs)) {
    if (r.gen.logprobs < 0) throw bad_request("'top_logprobs' needs 'logprobs' set to true", "top_logprobs");
    r.gen.logprobs = static_cast<int32_t>(*k);
  }
  return r;
}

completion_request parse_completion_request(const boost::json::value& body) {
  json_fields f(body, "");
  reject_unknown(body, completion_fields);
  completion_request r;
  r.prompts = parse_prompts(f);
  r.echo = f.boolean("echo").value_or(false);
  r.gen = parse_common(f, r.echo ? 0 : 1);
  if (auto k = f.integer("logprobs", 0, max_top_logprobs)) r.gen.logprobs = static_cast<int32_t>(*k);
  if (!r.gen.max_tokens) r.gen.max_tokens = completions_default_max_tokens;
  if (*r.gen.max_tokens == 0 && r.gen.stream)
    throw bad_request("'max_tokens' 0 (echo only) cannot be streamed", "max_tokens");
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
