// The public face: parse once, render per request.
#include "tandem/chat_template.hpp"

#include "builtins.hpp"
#include "json_value.hpp"
#include "interpreter.hpp"
#include "parser.hpp"

namespace tandem {

static std::string format_error(const std::string& message, int line, int column) {
  if (line == 0) return "chat template: error: " + message;
  return "chat template:" + std::to_string(line) + ":" + std::to_string(column) + ": error: " + message;
}

chat_template_error::chat_template_error(std::string message, int line, int column)
    : error(format_error(message, line, column)), message_(std::move(message)), line_(line), column_(column) {}

chat_template_error::~chat_template_error() = default;

chat_template_error chat_template_error::located(int line, int column) const {
  chat_template_error e(message_, line, column);
  e.raised_ = raised_;
  return e;
}

chat_template_error chat_template_error::raised(std::string message) {
  chat_template_error e(std::move(message));
  e.raised_ = true;
  return e;
}

namespace chat_detail {
struct program {
  std::string source;
  stmt_list body;
};
}  // namespace chat_detail

chat_template::chat_template(std::string source) {
  auto p = std::make_shared<chat_detail::program>();
  p->source = std::move(source);
  p->body = chat_detail::parse_template(chat_detail::tokenize(p->source));
  program_ = std::move(p);
}

chat_template::~chat_template() = default;
chat_template::chat_template(const chat_template&) = default;
chat_template& chat_template::operator=(const chat_template&) = default;
chat_template::chat_template(chat_template&&) noexcept = default;
chat_template& chat_template::operator=(chat_template&&) noexcept = default;

const std::string& chat_template::source() const { return program_->source; }

namespace {

using chat_detail::value;

value message_value(const chat_message& m) {
  auto d = std::make_shared<chat_detail::dict_data>();
  d->entries.emplace_back(value::string("role"), value::string(m.role));
  d->entries.emplace_back(value::string("content"), value::string(m.content));
  if (!m.name.empty()) d->entries.emplace_back(value::string("name"), value::string(m.name));
  if (!m.tool_call_id.empty()) d->entries.emplace_back(value::string("tool_call_id"), value::string(m.tool_call_id));
  if (!m.tool_calls_json.empty()) d->entries.emplace_back(value::string("tool_calls"), chat_detail::from_json(m.tool_calls_json));
  return value::dict(std::move(d));
}

}  // namespace

std::string chat_template::render(std::span<const chat_message> messages, const chat_render_options& opt) const {
  // Clearing every namespace after the render breaks reference cycles a template made
  // (`set ns.self = [ns]`), which shared ownership alone would leak.
  auto namespaces = std::make_shared<chat_detail::namespace_registry>();
  struct cycle_breaker {
    std::shared_ptr<chat_detail::namespace_registry> made;
    ~cycle_breaker() {
      for (auto& w : *made)
        if (auto d = w.lock()) d->entries.clear();
    }
  } breaker{namespaces};
  chat_detail::dict_data globals;
  chat_detail::install_globals(globals, namespaces);
  chat_detail::interpreter::scope root;
  for (auto& [k, v] : globals.entries) root[k.as_string()] = v;
  for (const auto& [k, v] : opt.extra) root[k] = value::string(v);
  chat_detail::value_list msgs;
  for (const auto& m : messages) msgs.push_back(message_value(m));
  root["messages"] = value::list(std::move(msgs));
  root["add_generation_prompt"] = value::boolean(opt.add_generation_prompt);
  root["bos_token"] = value::string(opt.bos_token);
  root["eos_token"] = value::string(opt.eos_token);
  root["tools"] = opt.tools_json.empty() ? value::none() : chat_detail::from_json(opt.tools_json);
  root["documents"] = value::none();
  chat_detail::interpreter in(program_->body, std::move(root));
  return in.run();
}

}  // namespace tandem
