#pragma once
// Token stream -> syntax tree. Statements: for (with loop filter, else), if/elif/else,
// set (name, tuple, namespace attribute, block form), macro, filter blocks, break and
// continue, and Hugging Face's {% generation %} marker. Expressions follow jinja2's
// grammar and precedence. Nesting is bounded so hostile templates give an error, not a
// stack overflow.
#include <string>
#include <vector>

#include "ast.hpp"
#include "lexer.hpp"

namespace tandem::chat_detail {

constexpr int max_nesting = 200;
// The variable a {% filter %} block's rendered body is bound to (not a valid identifier).
inline constexpr const char* filter_body_name = "(filter body)";

// Throws chat_template_error with line:col on syntax errors, unknown tags, unknown
// filters or tests, and nesting deeper than max_nesting.
stmt_list parse_template(std::vector<token> tokens);

}  // namespace tandem::chat_detail
