#pragma once
// tool_grammar: the grammar a chat request's tools put on its output, as an xgrammar
// structural tag in the model's call format (tool_parser.hpp). Each function is a tag whose
// opening fixes its name and whose content is its arguments:
//   hermes: <tool_call>\n{"name": "f", "arguments": ARGS}\n</tool_call>, ARGS JSON;
//   glm4:   <tool_call>f<arg_key>k</arg_key><arg_value>v</arg_value>...</tool_call>, the pairs
//           in xgrammar's glm_xml style (a string property's value raw text, others JSON).
//
//   if (auto spec = tool_call_grammar(request.tools, tool_format::glm4))
//     grammar = compiler.compile(*spec);  // grammar_error: a schema xgrammar cannot follow
//
// - tool_choice required / a named function: the answer is calls only (at least one; just
//   one without parallel_tool_calls), each function's arguments following its parameters
//   schema (only the named function's calls when named).
// - auto with a `strict` function: free text, but from "<tool_call>" on a call of one of the
//   tools; a strict function's arguments follow its schema, another's are free text up to
//   the closing tag (the parser still checks them).
// - otherwise (none, or auto without strict functions): nullopt, the output is free.
#include <optional>

#include "tandem/grammar.hpp"
#include "tool_parser.hpp"

namespace tandem::http {

std::optional<grammar_spec> tool_call_grammar(const tool_request& tools, tool_format format);

}  // namespace tandem::http
