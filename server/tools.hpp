#pragma once
// tools: OpenAI's function-calling request fields, validated — `tools`, `tool_choice`,
// `parallel_tool_calls` — and the assistant turns of the history that called tools.
//
//   json_fields f(body, "");
//   tool_request t = parse_tools(f);        // 400 naming the field on anything malformed
//   if (t.parse_output()) ...               // the answer is parsed for tool calls
#include <boost/json.hpp>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "json_fields.hpp"

namespace tandem::http {

struct tool_function {
  std::string name;
  boost::json::object parameters;  // a JSON Schema of type object ({} when absent)
  bool strict = false;             // its calls' arguments follow `parameters` (tool_grammar.hpp)
};

enum class tool_choice_kind : uint8_t { none, automatic, required, named };

struct tool_request {
  std::vector<tool_function> functions;
  std::string tools_json;  // the tools as the client sent them, for the chat template
  tool_choice_kind choice = tool_choice_kind::automatic;
  std::string forced;      // the function a named tool_choice asks for
  bool parallel = true;    // false: generation ends after the first complete call

  bool active() const { return !functions.empty(); }
  // Whether the output is parsed for calls (tool_choice none: the tools are in the prompt,
  // the answer is text).
  bool parse_output() const { return active() && choice != tool_choice_kind::none; }
  bool call_required() const { return choice == tool_choice_kind::required || choice == tool_choice_kind::named; }
  const tool_function* find(std::string_view name) const;
};

// tools, tool_choice and parallel_tool_calls of a chat request. The deprecated functions /
// function_call fields are rejected with a pointer to their replacements.
tool_request parse_tools(const json_fields& f);

// An assistant message's tool_calls ([{id, type: "function", function: {name, arguments}}],
// arguments a JSON string holding an object) as the JSON array the chat template gets:
// arguments parsed into an object, as vLLM hands them to templates. Empty when absent.
std::string parse_history_tool_calls(const json_fields& message);

}  // namespace tandem::http
