#pragma once
// Checks shared by the chat-prompt tests: that encode_chat_prompt keeps message content
// plain while the template's markers stay control tokens.
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <string>
#include <vector>

#include "tandem/chat_prompt.hpp"

namespace tandem::test {

// The control-token ids of `ids`, in order.
inline std::vector<int32_t> control_ids(const tokenizer& tok, const std::vector<int32_t>& ids) {
  std::vector<int32_t> out;
  std::copy_if(ids.begin(), ids.end(), std::back_inserter(out), [&](int32_t id) { return tok.is_control(id); });
  return out;
}

// The messages with every content replaced by harmless text: what the template alone makes.
inline std::vector<chat_message> harmless(std::vector<chat_message> messages) {
  for (chat_message& m : messages) m.content = "x";
  return messages;
}

// Encodes the conversation and checks, against the rendered prompt:
//  - the ids decode to the prompt (nothing lost or invented);
//  - no id whose bytes overlap a content span is a control token;
//  - the control tokens are exactly those of the same conversation with harmless content
//    (the template's own markers, nothing more, nothing less);
//  - the opt-out gives plain encode(render) (today's behaviour), which here holds more.
// Returns the ids.
inline std::vector<int32_t> check_content_stays_plain(const tokenizer& tok, const chat_template& tpl,
                                                      const std::vector<chat_message>& messages,
                                                      const chat_render_options& opt = {}) {
  std::vector<size_t> all(messages.size());
  for (size_t i = 0; i < all.size(); ++i) all[i] = i;
  const std::optional<located_prompt> located = render_locating_content(tpl, messages, opt, all);
  BOOST_TEST_REQUIRE(located.has_value(), "the content was not located");
  // Each span holds its message's content (or that content stripped of outer whitespace).
  for (const content_span& s : located->content)
    BOOST_TEST(messages[s.message].content.find(located->text.substr(s.begin, s.end - s.begin)) != std::string::npos);

  const std::vector<int32_t> ids = encode_chat_prompt(tok, tpl, messages, opt);
  BOOST_TEST(tok.decode(ids) == located->text);
  size_t at = 0;
  for (int32_t id : ids) {
    const size_t end = at + tok.token_bytes(id).size();
    for (const content_span& s : located->content) {
      const bool overlaps = at < s.end && s.begin < end;
      BOOST_TEST(!(overlaps && tok.is_control(id)),
                 "control token " << tok.token_bytes(id) << " at bytes [" << at << ", " << end
                                  << ") inside messages[" << s.message << "].content");
    }
    at = end;
  }
  BOOST_TEST(at == located->text.size());

  const std::vector<int32_t> markers = control_ids(tok, tok.encode(tpl.render(harmless(messages), opt)));
  BOOST_TEST(control_ids(tok, ids) == markers);

  const std::vector<int32_t> opted_out =
      encode_chat_prompt(tok, tpl, messages, opt, chat_prompt_options{.parse_special_in_content = true});
  BOOST_TEST(opted_out == tok.encode(tpl.render(messages, opt)));
  BOOST_TEST(control_ids(tok, opted_out).size() > markers.size(), "the content held no control-token text");
  return ids;
}

}  // namespace tandem::test
