#include "tool_parser.hpp"

#include <boost/json.hpp>
#include <fmt/format.h>

namespace tandem::http {
namespace {

constexpr std::string_view open_tag = "<tool_call>";
constexpr std::string_view close_tag = "</tool_call>";

std::string_view trim(std::string_view s) {
  const auto ws = " \t\r\n";
  const size_t b = s.find_first_not_of(ws);
  if (b == std::string_view::npos) return {};
  return s.substr(b, s.find_last_not_of(ws) - b + 1);
}

// Length of the longest tail of `text` that is a proper prefix of `tag` (held back, the
// tag may be arriving split across tokens).
size_t partial_tag(std::string_view text, std::string_view tag) {
  for (size_t n = std::min(text.size(), tag.size() - 1); n > 0; --n)
    if (text.substr(text.size() - n) == tag.substr(0, n)) return n;
  return 0;
}

// Hermes: {"name", "arguments"} or a list of them. "parameters" is accepted for
// "arguments" (llama.cpp does too); a string holding a JSON object is unwrapped.
std::vector<parsed_tool_call> hermes_calls(std::string_view body, std::string& error) {
  boost::system::error_code ec;
  const boost::json::value v = boost::json::parse(trim(body), ec);
  if (ec) {
    error = fmt::format("the call is not valid JSON ({})", ec.message());
    return {};
  }
  std::vector<const boost::json::value*> items;
  if (const auto* arr = v.if_array())
    for (const auto& e : *arr) items.push_back(&e);
  else items.push_back(&v);
  std::vector<parsed_tool_call> out;
  for (const auto* item : items) {
    const auto* o = item->if_object();
    const auto* name = o ? o->if_contains("name") : nullptr;
    if (!name || !name->is_string()) {
      error = "the call has no \"name\" string";
      return {};
    }
    const auto* args = o->if_contains("arguments");
    if (!args) args = o->if_contains("parameters");
    if (!args) {
      error = fmt::format("the call of '{}' has no \"arguments\"", std::string_view(name->get_string()));
      return {};
    }
    boost::json::value a = *args;
    if (a.is_string()) {
      boost::json::value inner = boost::json::parse(a.get_string(), ec);
      if (!ec) a = std::move(inner);
    }
    if (!a.is_object()) {
      error = fmt::format("the arguments of '{}' are not a JSON object", std::string_view(name->get_string()));
      return {};
    }
    out.push_back({std::string(name->get_string()), boost::json::serialize(a)});
  }
  return out;
}

bool schema_says_string(const tool_function* fn, std::string_view key) {
  if (!fn) return false;
  const auto* props = fn->parameters.if_contains("properties");
  const auto* p = props && props->is_object() ? props->get_object().if_contains(key) : nullptr;
  const auto* t = p && p->is_object() ? p->get_object().if_contains("type") : nullptr;
  return t && t->is_string() && t->get_string() == "string";
}

// GLM-4.5 / GLM-5: name<arg_key>k</arg_key><arg_value>v</arg_value>..., whitespace between.
std::vector<parsed_tool_call> glm4_calls(std::string_view body, const tool_request& tools, std::string& error) {
  const size_t first = body.find("<arg_key>");
  const std::string name(trim(body.substr(0, first)));
  if (name.empty()) {
    error = "the call has no function name";
    return {};
  }
  const tool_function* fn = tools.find(name);
  boost::json::object args;
  std::string_view rest = first == std::string_view::npos ? std::string_view() : body.substr(first);
  while (!trim(rest).empty()) {
    rest = trim(rest);
    const size_t k1 = rest.find("</arg_key>"), v0 = rest.find("<arg_value>"), v1 = rest.find("</arg_value>");
    if (rest.rfind("<arg_key>", 0) != 0 || k1 == std::string_view::npos || v0 == std::string_view::npos ||
        v1 == std::string_view::npos || !(k1 < v0 && v0 < v1) || !trim(rest.substr(k1 + 10, v0 - k1 - 10)).empty()) {
      error = fmt::format("the arguments of '{}' are not <arg_key>/<arg_value> pairs", name);
      return {};
    }
    const std::string key(trim(rest.substr(9, k1 - 9)));
    const std::string_view raw = rest.substr(v0 + 11, v1 - v0 - 11);
    boost::json::value val = boost::json::string(raw);
    if (!schema_says_string(fn, key)) {
      boost::system::error_code ec;
      boost::json::value parsed = boost::json::parse(raw, ec);
      if (!ec) val = std::move(parsed);
    }
    args[key] = std::move(val);
    rest = rest.substr(v1 + 12);
  }
  return {{name, boost::json::serialize(args)}};
}

}  // namespace

std::optional<tool_format> tool_format_named(std::string_view name) {
  if (name == "hermes") return tool_format::hermes;
  if (name == "glm4" || name == "glm45" || name == "glm4_moe") return tool_format::glm4;
  return std::nullopt;
}

tool_format detect_tool_format(std::string_view template_source) {
  return template_source.find("<arg_key>") != std::string_view::npos ? tool_format::glm4 : tool_format::hermes;
}

tool_call_parser::tool_call_parser(tool_format format, const tool_request& tools) : format_(format), tools_(&tools) {}

tool_call_parser::output tool_call_parser::push(std::string_view text) {
  output out;
  if (failed_) return out;
  buffer_ += text;
  scan(out);
  return out;
}

tool_call_parser::output tool_call_parser::finish() {
  output out;
  if (failed_) return out;
  if (in_call_) {
    failed_ = true;
    out.error = fmt::format("the output ended inside a tool call: {}{}", open_tag, buffer_);
    return out;
  }
  out.content = std::move(buffer_);
  buffer_.clear();
  return out;
}

void tool_call_parser::scan(output& out) {
  while (!failed_) {
    if (!in_call_) {
      const size_t at = buffer_.find(open_tag);
      if (at == std::string::npos) {
        const size_t keep = partial_tag(buffer_, open_tag);
        out.content += buffer_.substr(0, buffer_.size() - keep);
        buffer_.erase(0, buffer_.size() - keep);
        return;
      }
      out.content += buffer_.substr(0, at);
      buffer_.erase(0, at + open_tag.size());
      in_call_ = true;
    }
    const size_t end = buffer_.find(close_tag);
    if (end == std::string::npos) return;
    const std::string body = buffer_.substr(0, end);
    buffer_.erase(0, end + close_tag.size());
    in_call_ = false;
    close_call(body, out);
  }
}

void tool_call_parser::close_call(std::string_view body, output& out) {
  std::string error;
  std::vector<parsed_tool_call> calls =
      format_ == tool_format::glm4 ? glm4_calls(body, *tools_, error) : hermes_calls(body, error);
  for (size_t i = 0; i < calls.size() && error.empty(); ++i) error = check(calls[i]);
  if (!error.empty()) {
    failed_ = true;
    out.error = fmt::format("{}: {}{}{}", error, open_tag, body, close_tag);
    return;
  }
  calls_seen_ += calls.size();
  for (auto& c : calls) out.calls.push_back(std::move(c));
}

// The call against the request: a function it offered, with its required arguments.
std::string tool_call_parser::check(const parsed_tool_call& call) const {
  const tool_function* fn = tools_->find(call.name);
  if (!fn) return fmt::format("the model called '{}', which is not in 'tools'", call.name);
  if (tools_->choice == tool_choice_kind::named && call.name != tools_->forced)
    return fmt::format("the model called '{}' although tool_choice asked for '{}'", call.name, tools_->forced);
  const auto* req = fn->parameters.if_contains("required");
  if (!req || !req->is_array()) return {};
  const boost::json::object args = boost::json::parse(call.arguments).as_object();
  for (const auto& k : req->get_array())
    if (k.is_string() && !args.contains(k.get_string()))
      return fmt::format("the call of '{}' lacks the required argument '{}'", call.name, std::string_view(k.get_string()));
  return {};
}

}  // namespace tandem::http
