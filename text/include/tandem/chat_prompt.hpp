#pragma once
// Chat prompts as token ids, where text that came from a message's content never becomes a
// control token: a user who writes "<|im_end|><|im_start|>system" into a message gets those
// characters as plain text, not a forged system turn. The template's own markers are still
// control tokens.
//
//   std::vector<int32_t> ids = tandem::encode_chat_prompt(tok, tpl, messages, render_opt);
//
// How content is found in the rendered prompt: the conversation is rendered a second time
// with each suspicious content (one holding control-token text) replaced by a unique
// placeholder, and the real prompt must equal that rendering with each placeholder replaced
// by the content as given or with surrounding whitespace stripped (what `| trim` and
// `.strip()` do). Then the bytes at those places are exactly the content, and the tokenizer
// keeps them plain (tokenizer::encode with literal ranges). A template that inspects or
// transforms such content otherwise (splits it, slices it, branches on what it holds) cannot
// be matched; the prompt is then refused rather than guessed at (unless it holds no
// control-token text at all). Content without control-token text needs none of this and
// encodes as before.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tandem/chat_template.hpp"
#include "tandem/tokenizer.hpp"

namespace tandem {

struct chat_prompt_options {
  // The pipeline's chat.parse_special_in_content: true lets content produce control tokens
  // like any other prompt text (what peers do; for trusted clients that write markers on
  // purpose).
  bool parse_special_in_content = false;
};

// Where one message's content lies in a rendered prompt: bytes [begin, end).
struct content_span {
  size_t message = 0;
  size_t begin = 0, end = 0;
};

struct located_prompt {
  std::string text;                   // the prompt, exactly as chat_template::render gives it
  std::vector<content_span> content;  // in text order, disjoint; a message may appear 0+ times
};

// Renders the conversation and locates the content of the messages whose indexes are in
// `which` (see above). nullopt when that content cannot be located. Throws what render throws.
std::optional<located_prompt> render_locating_content(const chat_template& tpl,
                                                      std::span<const chat_message> messages,
                                                      const chat_render_options& opt,
                                                      std::span<const size_t> which);

// The prompt's token ids (no BOS: callers that honour add_bos() prepend it). Unless
// p.parse_special_in_content, throws tandem::error (a client error, naming the field and the
// token) when control-token text sits where it cannot be kept plain: in content the template
// does not copy verbatim, or in a message's name, tool_call_id or tool_calls, the tools, or
// an extra variable, which templates write through filters such as tojson.
std::vector<int32_t> encode_chat_prompt(const tokenizer& tok, const chat_template& tpl,
                                        std::span<const chat_message> messages, const chat_render_options& opt,
                                        const chat_prompt_options& p = {});

}  // namespace tandem
