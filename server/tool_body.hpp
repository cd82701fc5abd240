#pragma once
// tool_body: inside tool_call_parser — what sits between <tool_call> and </tool_call>, read
// incrementally per format (tool_body_hermes.cpp, tool_body_glm4.cpp), and the writer that
// turns what a reader finds into the parser's pieces, checking each call against the
// request's tools.
#include <memory>
#include <string>
#include <string_view>

#include "tool_parser.hpp"

namespace tandem::http {

class tool_call_writer {
 public:
  explicit tool_call_writer(const tool_request& tools) : tools_(&tools) {}

  // Where pieces go until the next call (the parser's output of one push).
  void to(tool_call_parser::output* out) { out_ = out; }
  void content(std::string_view text);
  // A call of `name` starts; false (and failed) when the request offered no such function
  // or tool_choice names another.
  bool begin(const std::string& name);
  // More of the open call's arguments text.
  void arguments(std::string_view fragment);
  // The open call is complete: its arguments must be a JSON object holding the function's
  // required properties; false (and failed) otherwise.
  bool end();
  void fail(std::string why);

  bool failed() const { return !error_.empty(); }
  const std::string& error() const { return error_; }
  // The function of the open call (schema lookups); null before begin.
  const tool_function* function() const { return fn_; }

 private:
  const tool_request* tools_;
  tool_call_parser::output* out_ = nullptr;
  const tool_function* fn_ = nullptr;
  std::string name_, arguments_;
  size_t calls_ = 0;
  std::string error_;
};

// One call's body as it arrives; never sees any part of </tool_call>.
class tool_body_reader {
 public:
  virtual ~tool_body_reader() = default;
  virtual void push(std::string_view text) = 0;
  // </tool_call> arrived: the body is complete.
  virtual void close() = 0;
};

std::unique_ptr<tool_body_reader> hermes_body_reader(tool_call_writer& w);
std::unique_ptr<tool_body_reader> glm4_body_reader(tool_call_writer& w);

// Helpers the readers share.
std::string_view trim(std::string_view s);
bool is_json_space(char c);
// JSON text without the whitespace outside its strings.
std::string compact_json(std::string_view text);
// Length of the longest tail of `text` that is a proper prefix of `tag` (held back: the tag
// may be arriving split across tokens).
size_t partial_tag(std::string_view text, std::string_view tag);

}  // namespace tandem::http
