#include "tools.hpp"

#include <fmt/format.h>

#include <set>

#include "api_error.hpp"

namespace tandem::http {
namespace {

// OpenAI: a-z, A-Z, 0-9, underscores and dashes, at most 64 characters.
bool valid_function_name(std::string_view n) {
  if (n.empty() || n.size() > 64) return false;
  for (char c : n)
    if (!(std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-')) return false;
  return true;
}

// The parts of a JSON Schema the server relies on: an object schema whose properties are
// schemas and whose required entries are strings.
void check_parameters(const boost::json::value& v, const std::string& param) {
  const auto* o = v.if_object();
  if (!o) throw bad_request(fmt::format("'{}' must be a JSON Schema object", param), param);
  if (const auto* t = o->if_contains("type"); t && !(t->is_string() && t->get_string() == "object"))
    throw bad_request(fmt::format("'{}.type' must be \"object\": function arguments are a JSON object", param), param);
  if (const auto* p = o->if_contains("properties")) {
    const auto* props = p->if_object();
    if (!props) throw bad_request(fmt::format("'{}.properties' must be an object", param), param);
    for (const auto& [k, s] : *props)
      if (!s.is_object() && !s.is_bool())
        throw bad_request(fmt::format("'{}.properties.{}' must be a schema (an object)", param, std::string_view(k)), param);
  }
  if (const auto* r = o->if_contains("required")) {
    const auto* arr = r->if_array();
    bool ok = arr != nullptr;
    if (arr)
      for (const auto& e : *arr) ok = ok && e.is_string();
    if (!ok) throw bad_request(fmt::format("'{}.required' must be a list of property names", param), param);
  }
}

tool_function parse_tool(const boost::json::value& v, size_t i) {
  json_fields t(v, fmt::format("tools[{}]", i));
  const auto type = t.string("type");
  if (type != "function")
    throw bad_request(fmt::format("'{}' must be \"function\"", t.param("type")), t.param("type"));
  const auto* fn = t.find("function");
  if (!fn) throw bad_request(fmt::format("'{}' is required", t.param("function")), t.param("function"));
  json_fields f(*fn, t.param("function"));
  auto name = f.string("name");
  if (!name || !valid_function_name(*name))
    throw bad_request(fmt::format("'{}' must be 1-64 letters, digits, '_' or '-'", f.param("name")), f.param("name"));
  f.string("description");  // type-checked; the template renders it
  tool_function out{*name, {}, f.boolean("strict").value_or(false)};
  if (const auto* p = f.find("parameters")) {
    check_parameters(*p, f.param("parameters"));
    out.parameters = p->get_object();
  }
  return out;
}

void parse_choice(const json_fields& f, tool_request& t) {
  const auto* c = f.find("tool_choice");
  if (!c) {
    t.choice = tool_choice_kind::automatic;  // OpenAI: auto when tools are present
    return;
  }
  if (!t.active()) throw bad_request("'tool_choice' is only allowed when 'tools' are given", "tool_choice");
  if (c->is_string()) {
    const std::string_view s = c->get_string();
    if (s == "none") t.choice = tool_choice_kind::none;
    else if (s == "auto") t.choice = tool_choice_kind::automatic;
    else if (s == "required") t.choice = tool_choice_kind::required;
    else throw bad_request(fmt::format("'tool_choice' must be none, auto, required or a function; got '{}'", s), "tool_choice");
    return;
  }
  json_fields o(*c, "tool_choice");
  if (o.string("type") != "function")
    throw bad_request("'tool_choice.type' must be \"function\"", "tool_choice.type");
  const auto* fn = o.find("function");
  if (!fn) throw bad_request("'tool_choice.function' is required", "tool_choice.function");
  auto name = json_fields(*fn, "tool_choice.function").string("name");
  if (!name) throw bad_request("'tool_choice.function.name' is required", "tool_choice.function.name");
  if (!t.find(*name))
    throw bad_request(fmt::format("'tool_choice' names the function '{}', which is not in 'tools'", *name),
                      "tool_choice.function.name");
  t.choice = tool_choice_kind::named;
  t.forced = *name;
}

}  // namespace

const tool_function* tool_request::find(std::string_view name) const {
  for (const auto& f : functions)
    if (f.name == name) return &f;
  return nullptr;
}

tool_request parse_tools(const json_fields& f) {
  if (f.find("functions")) throw bad_request("'functions' is deprecated and not supported; use 'tools'", "functions");
  if (f.find("function_call"))
    throw bad_request("'function_call' is deprecated and not supported; use 'tool_choice'", "function_call");
  tool_request t;
  if (const auto* v = f.find("tools")) {
    const auto* arr = v->if_array();
    if (!arr) throw bad_request("'tools' must be a list", "tools");
    std::set<std::string, std::less<>> seen;
    for (size_t i = 0; i < arr->size(); ++i) {
      tool_function fn = parse_tool((*arr)[i], i);
      if (!seen.insert(fn.name).second)
        throw bad_request(fmt::format("'tools' names the function '{}' twice", fn.name), "tools");
      t.functions.push_back(std::move(fn));
    }
    if (!arr->empty()) t.tools_json = boost::json::serialize(*v);
  }
  parse_choice(f, t);
  t.parallel = f.boolean("parallel_tool_calls").value_or(true);
  return t;
}

std::string parse_history_tool_calls(const json_fields& m) {
  const auto* v = m.find("tool_calls");
  if (!v) return {};
  const auto* arr = v->if_array();
  if (!arr) throw bad_request(fmt::format("'{}' must be a list", m.param("tool_calls")), m.param("tool_calls"));
  boost::json::array out;
  for (size_t i = 0; i < arr->size(); ++i) {
    json_fields call((*arr)[i], fmt::format("{}[{}]", m.param("tool_calls"), i));
    if (call.string("type").value_or("function") != "function")
      throw bad_request(fmt::format("'{}' must be \"function\"", call.param("type")), call.param("type"));
    const auto* fn = call.find("function");
    if (!fn) throw bad_request(fmt::format("'{}' is required", call.param("function")), call.param("function"));
    json_fields f(*fn, call.param("function"));
    auto name = f.string("name");
    if (!name) throw bad_request(fmt::format("'{}' is required", f.param("name")), f.param("name"));
    auto args_text = f.string("arguments").value_or("{}");
    boost::system::error_code ec;
    boost::json::value args = boost::json::parse(args_text, ec);
    if (ec || !args.is_object())
      throw bad_request(fmt::format("'{}' must be a JSON object encoded as a string", f.param("arguments")),
                        f.param("arguments"));
    boost::json::object c;
    c["id"] = call.string("id").value_or("");
    c["type"] = "function";
    boost::json::object function;
    function["name"] = *name;
    function["arguments"] = std::move(args);
    c["function"] = std::move(function);
    out.push_back(std::move(c));
  }
  return boost::json::serialize(out);
}

}  // namespace tandem::http
