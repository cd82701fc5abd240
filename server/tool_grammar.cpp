#include "tool_grammar.hpp"

#include <boost/json.hpp>

namespace tandem::http {
namespace {

// Whitespace runs inside a call's JSON or between its pairs: at most this many characters,
// so a model cannot loop on newlines inside a call (xgrammar requires at least 1).
constexpr int max_whitespace = 1;

// What a function's arguments may be: its parameters schema, or, when `free`, any text up to
// the tag's end.
boost::json::object arguments_format(const tool_function& f, tool_format format, bool free) {
  if (free) return {{"type", "any_text"}};
  boost::json::object schema = f.parameters.empty() ? boost::json::object{{"type", "object"}} : f.parameters;
  return {{"type", "json_schema"},
          {"json_schema", std::move(schema)},
          {"style", format == tool_format::glm4 ? "glm_xml" : "json"},
          {"max_whitespace_cnt", max_whitespace}};
}

// One call of `f` in the model's format.
boost::json::object call_tag(const tool_function& f, tool_format format, bool free) {
  const bool glm = format == tool_format::glm4;
  return {{"type", "tag"},
          {"begin", glm ? "<tool_call>" + f.name : "<tool_call>\n{\"name\": \"" + f.name + "\", \"arguments\": "},
          {"content", arguments_format(f, format, free)},
          {"end", glm ? "</tool_call>" : "}\n</tool_call>"}};
}

}  // namespace

std::optional<grammar_spec> tool_call_grammar(const tool_request& t, tool_format format) {
  const bool forced = t.call_required();
  bool any_strict = false;
  for (const tool_function& f : t.functions) any_strict = any_strict || f.strict;
  if (!forced && !(t.choice == tool_choice_kind::automatic && any_strict)) return std::nullopt;
  boost::json::array tags;
  for (const tool_function& f : t.functions) {
    if (t.choice == tool_choice_kind::named && f.name != t.forced) continue;
    tags.push_back(call_tag(f, format, !forced && !f.strict));
  }
  boost::json::object calls{{"tags", std::move(tags)}, {"stop_after_first", !t.parallel}};
  if (forced) {
    // Calls only. GLM writes consecutive calls with nothing between them; Hermes / Qwen one a line.
    calls["type"] = "tags_with_separator";
    calls["separator"] = format == tool_format::glm4 ? "" : "\n";
    calls["at_least_one"] = true;
  } else {
    calls["type"] = "triggered_tags";
    calls["triggers"] = boost::json::array{"<tool_call>"};
    calls["at_least_one"] = false;
  }
  return grammar_spec::structural_tag(
      boost::json::serialize(boost::json::object{{"type", "structural_tag"}, {"format", std::move(calls)}}));
}

}  // namespace tandem::http
