#pragma once
// Chat templates: the subset of Jinja that model chat templates use, rendered the way
// Hugging Face transformers renders them (jinja2 ImmutableSandboxedEnvironment with
// trim_blocks=True, lstrip_blocks=True, loop controls, and the tojson / raise_exception /
// strftime_now additions), so that a prompt built here is byte-identical to the one a
// user gets from `tokenizer.apply_chat_template`.
//
// Usage:
//   tandem::chat_template tpl(metadata.chat_template);          // throws on syntax errors
//   std::vector<tandem::chat_message> msgs{{"user", "Hi"}};
//   tandem::chat_render_options opt;
//   opt.bos_token = "<|im_start|>";
//   std::string prompt = tpl.render(msgs, opt);                   // throws on runtime errors
#include <map>
#include <memory>
#include <span>
#include <string>

#include "tandem/error.hpp"

namespace tandem {

struct chat_message {
  std::string role;          // system | user | assistant | tool
  std::string content{};
  std::string name{};        // optional (tool name); empty = absent
  std::string tool_call_id{};  // optional; empty = absent
  // Assistant turns that called tools: a JSON array of OpenAI tool calls
  // ([{"id", "type": "function", "function": {"name", "arguments": {...}}}]), arguments
  // already an object as vLLM hands them to templates. Empty = absent.
  std::string tool_calls_json{};
};

struct chat_render_options {
  bool add_generation_prompt = true;
  std::string bos_token, eos_token;
  // Extra string variables visible to the template (e.g. date_string). They override
  // nothing: messages, add_generation_prompt, bos_token, eos_token and tools win.
  std::map<std::string, std::string> extra;
  // The request's tools as a JSON array (OpenAI's [{"type": "function", "function": {...}}]),
  // visible as `tools` the way transformers' apply_chat_template(tools=...) passes them.
  // Empty = none. Invalid JSON throws chat_template_error.
  std::string tools_json;
};

// A syntax or runtime error in a chat template. what() reads
// "chat template:LINE:COL: error: MESSAGE"; message() is MESSAGE alone (for a
// raise_exception(...) in the template, exactly the text the template passed).
// line() is 0 when no position is known.
class chat_template_error : public error {
 public:
  chat_template_error(std::string message, int line = 0, int column = 0);
  ~chat_template_error() override;
  const std::string& message() const { return message_; }
  int line() const { return line_; }
  int column() const { return column_; }
  bool raised_by_template() const { return raised_; }
  // A copy that carries a position (used as the error bubbles out of an expression).
  chat_template_error located(int line, int column) const;
  static chat_template_error raised(std::string message);

 private:
  std::string message_;
  int line_, column_;
  bool raised_ = false;
};

namespace chat_detail {
struct program;
}

class chat_template {
 public:
  // Parses the template; throws chat_template_error (a tandem::error) with line:col and a
  // message on syntax errors and on unknown filters or tests.
  explicit chat_template(std::string source);
  ~chat_template();
  chat_template(const chat_template&);
  chat_template& operator=(const chat_template&);
  chat_template(chat_template&&) noexcept;
  chat_template& operator=(chat_template&&) noexcept;

  // Renders the conversation. Each message is a dict with keys role and content, plus name,
  // tool_call_id and tool_calls only when non-empty; `tools` is opt.tools_json parsed (none
  // when empty) and `documents` none. Throws
  // chat_template_error on runtime errors: raise_exception(msg) in the template, an
  // operation on an undefined value (jinja2's default Undefined rules), type errors, or
  // the sandbox limits (recursion depth, loop iterations, output size).
  std::string render(std::span<const chat_message> messages, const chat_render_options& opt) const;

  const std::string& source() const;

 private:
  std::shared_ptr<const chat_detail::program> program_;
};

}  // namespace tandem
