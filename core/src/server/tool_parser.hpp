#pragma once
// tool_parser: the tool calls in a model's streamed output, per chat-template family.
//
//   tool_call_parser p(tool_format::hermes, tools);
//   auto a = p.push("Let me check. <tool_c");   // a.content == "Let me check. ", rest held back
//   auto b = p.push("all>{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}</tool_call>");
//   // b.calls[0].name == "get_weather", b.calls[0].arguments == R"({"city":"Paris"})"
//   auto c = p.finish();                        // what is held back; an open call is an error
//
// Formats (both wrap a call in <tool_call> ... </tool_call>):
//   hermes: a JSON object {"name", "arguments"} (Hermes / Qwen), or a JSON list of such
//           objects (SmolLM2's documented format: <tool_call>[{...}, {...}]</tool_call>);
//   glm4:   name, then <arg_key>k</arg_key><arg_value>v</arg_value> pairs (GLM-4.5 / GLM-5,
//           as vLLM's glm4_moe parser reads them): a value stays a string when the tool's
//           schema types it string, else it is read as JSON when it parses as JSON.
// A call that does not parse, names a function not in the request, has arguments that are
// not an object, or lacks a required argument is an error (output.error), never content.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "tools.hpp"

namespace tandem::http {

enum class tool_format : uint8_t { hermes, glm4 };

// "hermes" | "glm4"; nullopt for anything else.
std::optional<tool_format> tool_format_named(std::string_view name);
// The format a chat template teaches its model: glm4 when it renders <arg_key>, else hermes.
tool_format detect_tool_format(std::string_view template_source);

struct parsed_tool_call {
  std::string name;
  std::string arguments;  // a JSON object, serialized
};

class tool_call_parser {
 public:
  tool_call_parser(tool_format format, const tool_request& tools);

  struct output {
    std::string content;                  // text outside calls, safe to release now
    std::vector<parsed_tool_call> calls;  // calls completed by this piece
    std::string error;                    // set once a call is malformed; nothing follows
  };
  output push(std::string_view text);
  // End of the output: the held-back text; a call left open is an error.
  output finish();
  size_t calls_seen() const { return calls_seen_; }

 private:
  void scan(output& out);
  void close_call(std::string_view body, output& out);
  std::string check(const parsed_tool_call& call) const;  // empty = a valid call

  tool_format format_;
  const tool_request* tools_;
  std::string buffer_;
  bool in_call_ = false;
  bool failed_ = false;
  size_t calls_seen_ = 0;
};

}  // namespace tandem::http
