#pragma once
// Splits template source into text and tag tokens, applying jinja2's whitespace rules
// as Hugging Face configures them: trim_blocks (drop the first newline after a block or
// comment tag), lstrip_blocks (drop spaces and tabs before a block or comment tag that
// starts its line), the `-` / `+` markers, newline normalisation, and removal of a single
// trailing newline (keep_trailing_newline=False).
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::chat_detail {

enum class tok { text, var_begin, var_end, block_begin, block_end, name, string, integer, floating, op, eof };

struct token {
  tok type;
  std::string text;  // text, name, operator, or decoded string literal
  int line = 0, col = 0;
  int64_t int_value = 0;
  double float_value = 0;
};

struct lexer_options {
  bool trim_blocks = true;
  bool lstrip_blocks = true;
};

// Throws chat_template_error with line:col on unterminated tags, bad characters,
// unbalanced brackets or bad string escapes.
std::vector<token> tokenize(const std::string& source, const lexer_options& opt = {});

// Python's unicode-escape decoding of a string literal's body (the quotes removed).
std::string decode_string_literal(const std::string& body);

}  // namespace tandem::chat_detail
