#pragma once
// The syntax tree of a parsed template. Nodes are plain data; the interpreter walks them.
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "value.hpp"

namespace tandem::chat_detail {

enum class expr_kind {
  literal,    // lit
  name,       // name
  list,       // args: items
  tuple,      // args: items (a list at run time)
  dict,       // args: key0, value0, key1, value1, ...
  attr,       // args[0].name
  subscript,  // args[0][args[1]]
  slice,      // args[0][args[1]:args[2]:args[3]] (null = omitted)
  call,       // args[0](args[1..], kwargs)
  filter,     // args[0] | name(args[1..], kwargs)
  test,       // args[0] is [not] name(args[1..]); negated
  unary,      // op args[0]: "not", "-", "+"
  binary,     // args[0] op args[1]: + - * / // % ** ~ and or in "not in"
  compare,    // args[0] ops[0] args[1] ops[1] args[2] ...
  condexpr,   // args[0] if args[1] else args[2] (args[2] may be null)
};

struct expr;
using expr_ptr = std::unique_ptr<expr>;

struct expr {
  expr_kind kind;
  int line = 0, col = 0;
  value lit;
  std::string name;  // variable, attribute, filter, test or operator
  std::vector<expr_ptr> args;
  std::vector<std::pair<std::string, expr_ptr>> kwargs;
  std::vector<std::string> ops;  // compare chain
  bool negated = false;
  int depth = 1;  // height of this subtree, bounded by the parser
};

enum class stmt_kind { text, output, if_, for_, set, set_block, macro, filter_block, break_, continue_, body };

struct stmt;
using stmt_ptr = std::unique_ptr<stmt>;
using stmt_list = std::vector<stmt_ptr>;

struct stmt {
  stmt_kind kind;
  int line = 0, col = 0;
  std::string text;  // text; macro name
  // output: value; for: iterable; set: value; filter_block: the filter chain, whose input
  // slot is left empty and filled with the block's rendered text.
  expr_ptr expr;
  expr_ptr target;       // for, set, set_block (name, tuple of names, or ns.attr)
  expr_ptr condition;    // for ... if condition
  stmt_list body;        // for, set_block, macro, filter_block, body (a generation block)
  stmt_list else_body;   // for, if
  std::vector<std::pair<expr_ptr, stmt_list>> branches;  // if / elif
  std::vector<std::string> params;                       // macro
  std::vector<expr_ptr> defaults;                        // macro, aligned with params (null = none)
};

}  // namespace tandem::chat_detail
