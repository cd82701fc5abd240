#pragma once
// tool_parser: the tool calls in a model's streamed output, per chat-template family, read
// as the text arrives so that a call's arguments can be streamed while they are generated.
//
//   tool_call_parser p(tool_format::hermes, tools);
//   auto a = p.push("Let me check. <tool_c");  // content "Let me check. ", the rest held back
//   auto b = p.push("all>{\"name\": \"get_weather\", \"arguments\": {\"ci");
//   // b: begin (index 0, name "get_weather"), arguments (index 0, "{\"ci")
//   auto c = p.push("ty\": \"Paris\"}}</tool_call>");
//   // c: arguments (index 0, "ty\":\"Paris\"}"), end (index 0, {"get_weather", "{\"city\":\"Paris\"}"})
//   auto d = p.finish();                       // what is held back; an open call is an error
//
// Formats (both wrap a call in <tool_call> ... </tool_call>):
//   hermes: a JSON object {"name", "arguments"} (Hermes / Qwen), or a JSON list of such
//           objects (SmolLM2's documented format: <tool_call>[{...}, {...}]</tool_call>);
//   glm4:   name, then <arg_key>k</arg_key><arg_value>v</arg_value> pairs (GLM-4.5 / GLM-5,
//           as vLLM's glm4_moe parser reads them): a value stays a string when the tool's
//           schema types it string, else it is read as JSON when it parses as JSON.
// The arguments of a call are JSON text without whitespace outside strings; the fragments
// of a call concatenate to exactly the arguments its end carries. A call that does not
// parse, names a function not in the request, has arguments that are not an object, or
// lacks a required argument is an error (output.error), never content; pieces produced
// before the error was found stay valid (a stream has sent them already).
#include <memory>
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

// One step of the output, in the order the model wrote it.
struct tool_piece {
  enum class kind : uint8_t {
    content,    // text outside calls (text)
    begin,      // call `index` starts: its function is known (text = the name)
    arguments,  // more of call `index`'s arguments (text = the fragment)
    end,        // call `index` is complete and valid (call)
  };
  kind k = kind::content;
  size_t index = 0;
  std::string text;
  parsed_tool_call call;
};

class tool_body_reader;
class tool_call_writer;

class tool_call_parser {
 public:
  tool_call_parser(tool_format format, const tool_request& tools);
  ~tool_call_parser();

  struct output {
    std::vector<tool_piece> pieces;
    std::string error;  // set once a call is malformed; nothing follows
  };
  output push(std::string_view text);
  // End of the output: the held-back text; a call left open is an error.
  output finish();
  // Inside <tool_call> ... (its end not yet seen).
  bool in_call() const { return in_call_; }

 private:
  void scan();
  void feed_body(size_t n);
  void report(output& out);

  tool_format format_;
  std::unique_ptr<tool_call_writer> writer_;
  std::unique_ptr<tool_body_reader> reader_;  // the open call's
  std::string buffer_;                        // text not yet classified
  std::string body_;                          // the open call's text so far (for errors)
  bool in_call_ = false;
  bool failed_ = false;
};

}  // namespace tandem::http
