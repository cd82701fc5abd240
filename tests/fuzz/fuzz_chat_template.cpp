// libFuzzer harness: the chat-template engine (lexer, parser, interpreter) and the content
// locating of tandem/chat_prompt.hpp. Input: template source, '\0', then message contents
// separated by '\1' (roles cycle user / assistant / system / tool). Parsing and rendering
// either succeed or throw chat_template_error (the sandbox's limits included); a located
// prompt is the rendering itself with sorted, disjoint spans that each hold (a stripped
// form of) their message's content; encode_chat_prompt on the synthetic vocab either
// refuses with tandem::error or gives ids that decode to the prompt.
#include <cstdint>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "synthetic_vocab.hpp"
#include "tandem/chat_prompt.hpp"
#include "tandem/error.hpp"
#include "utf8.hpp"

using namespace tandem;
using tandem::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static const tokenizer tok = tokenizer::from_metadata(test::synthetic_vocab::make({"h e", "l l"}).metadata());
  const std::string_view in(reinterpret_cast<const char*>(data), size);
  const size_t cut = in.find('\0');
  const std::string source(in.substr(0, cut));
  std::vector<chat_message> messages;
  if (cut != std::string_view::npos) {
    static const char* const roles[] = {"user", "assistant", "system", "tool"};
    std::string_view rest = in.substr(cut + 1);
    for (size_t i = 0; i < 16; ++i) {
      const size_t sep = rest.find('\1');
      messages.push_back({roles[i % 4], std::string(rest.substr(0, sep))});
      if (sep == std::string_view::npos) break;
      rest.remove_prefix(sep + 1);
    }
  }
  std::optional<chat_template> tpl;
  try {
    tpl.emplace(source);
  } catch (const chat_template_error&) {
    return 0;
  }
  chat_render_options opt;
  opt.add_generation_prompt = size % 2 == 0;
  opt.bos_token = "<|im_start|>";
  std::string rendered;
  try {
    rendered = tpl->render(messages, opt);
  } catch (const chat_template_error&) {
    return 0;
  }
  // strftime_now may tick between two renderings: the properties below compare renderings.
  if (source.find("strftime") != std::string::npos) return 0;

  std::vector<size_t> all(messages.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::optional<located_prompt> located = render_locating_content(*tpl, messages, opt, all);
  if (located) {
    require(located->text == rendered, "the located prompt is not the rendering");
    size_t last = 0;
    for (const content_span& s : located->content) {
      require(s.begin >= last && s.begin < s.end && s.end <= rendered.size(), "spans not sorted, disjoint, inside");
      require(s.message < messages.size(), "a span names no message");
      require(messages[s.message].content.find(rendered.substr(s.begin, s.end - s.begin)) != std::string::npos,
              "a span does not hold its message's content");
      last = s.end;
    }
  }
  try {
    const std::vector<int32_t> ids = encode_chat_prompt(tok, *tpl, messages, opt);
    require(tok.decode(ids) == rendered, "the prompt's ids do not decode to the rendering");
  } catch (const chat_template_error&) {
    // The placeholder rendering may meet a limit the real one did not, or the reverse.
  } catch (const error&) {
    // A refusal needs control-token text to keep plain; else only invalid UTF-8 fails.
    require(tok.find_control_text(rendered).has_value() || detail::find_invalid_utf8(rendered) != std::string::npos,
            "a refusal for a valid prompt without control-token text");
  }
  return 0;
}
