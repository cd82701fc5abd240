// encode_chat_prompt: render, locate suspicious content, encode with it kept plain.
#include "tandem/chat_prompt.hpp"

#include <fmt/format.h>

#include "json_value.hpp"
#include "value.hpp"

namespace tandem {
namespace {

constexpr const char* opt_out_hint =
    "remove it, or set chat.parse_special_in_content: true in the pipeline to let content produce control tokens";

std::optional<std::string> control_text_in(const tokenizer& tok, std::string_view text) {
  if (auto id = tok.find_control_text(text)) return tok.token_bytes(*id);
  return std::nullopt;
}

// The first control-token text in any string of a JSON document, as the template sees it
// (after unescaping: "\u003c|im_end|\u003e" is "<|im_end|>" once parsed).
std::optional<std::string> control_text_in_json(const tokenizer& tok, const chat_detail::value& v) {
  switch (v.type()) {
    case chat_detail::kind::string: return control_text_in(tok, v.as_string());
    case chat_detail::kind::list:
      for (const chat_detail::value& item : v.as_list())
        if (auto t = control_text_in_json(tok, item)) return t;
      return std::nullopt;
    case chat_detail::kind::dict:
      for (const auto& [key, item] : v.as_dict().entries) {
        if (auto t = control_text_in_json(tok, key)) return t;
        if (auto t = control_text_in_json(tok, item)) return t;
      }
      return std::nullopt;
    default: return std::nullopt;
  }
}

[[noreturn]] void refuse(const std::string& field, const std::string& token, const char* why) {
  throw error(fmt::format("{} holds the control-token text '{}', {}; {}", field, token, why, opt_out_hint));
}

// Fields a template writes through filters (tojson, string formatting) or as names, where
// no span can be located: control-token text there is refused outright.
void check_unlocatable_fields(const tokenizer& tok, std::span<const chat_message> messages,
                              const chat_render_options& opt) {
  constexpr const char* why = "which the chat template would turn into a control token";
  for (size_t i = 0; i < messages.size(); ++i) {
    const chat_message& m = messages[i];
    const std::pair<const char*, const std::string*> fields[] = {
        {"role", &m.role}, {"name", &m.name}, {"tool_call_id", &m.tool_call_id}};
    for (const auto& [name, text] : fields)
      if (auto t = control_text_in(tok, *text)) refuse(fmt::format("messages[{}].{}", i, name), *t, why);
    if (!m.tool_calls_json.empty())
      if (auto t = control_text_in_json(tok, chat_detail::from_json(m.tool_calls_json)))
        refuse(fmt::format("messages[{}].tool_calls", i), *t, why);
  }
  if (!opt.tools_json.empty())
    if (auto t = control_text_in_json(tok, chat_detail::from_json(opt.tools_json))) refuse("tools", *t, why);
  for (const auto& [name, text] : opt.extra)
    if (auto t = control_text_in(tok, text)) refuse(fmt::format("the template variable '{}'", name), *t, why);
}

}  // namespace

std::vector<int32_t> encode_chat_prompt(const tokenizer& tok, const chat_template& tpl,
                                        std::span<const chat_message> messages, const chat_render_options& opt,
                                        const chat_prompt_options& p) {
  if (p.parse_special_in_content) return tok.encode(tpl.render(messages, opt));
  check_unlocatable_fields(tok, messages, opt);
  std::vector<size_t> suspicious;
  for (size_t i = 0; i < messages.size(); ++i)
    if (tok.find_control_text(messages[i].content)) suspicious.push_back(i);
  // Nothing to keep plain: the prompt is encoded exactly as before (and rendered once).
  if (suspicious.empty()) return tok.encode(tpl.render(messages, opt));

  const std::optional<located_prompt> located = render_locating_content(tpl, messages, opt, suspicious);
  if (!located) {
    // The template inspects or transforms that content; if no control-token text reached the
    // prompt (it wrote only, say, the content's length), nothing needs keeping plain.
    std::string text = tpl.render(messages, opt);
    if (!tok.find_control_text(text)) return tok.encode(text);
    const size_t i = suspicious.front();
    refuse(fmt::format("messages[{}].content", i), *control_text_in(tok, messages[i].content),
           "and the chat template does not copy that content into the prompt verbatim (it inspects or transforms it), "
           "so it cannot be kept as plain text");
  }
  std::vector<tokenizer::byte_range> literal;
  literal.reserve(located->content.size());
  for (const content_span& s : located->content) literal.push_back({s.begin, s.end});
  return tok.encode(located->text, literal);
}

}  // namespace tandem
