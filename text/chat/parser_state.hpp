#pragma once
// The cursor and helpers shared by the statement parser and the expression parser.
#include <string>
#include <vector>

#include "ast.hpp"
#include "lexer.hpp"

namespace tandem::chat_detail {

class parser_state {
 public:
  explicit parser_state(std::vector<token> tokens) : toks_(std::move(tokens)) {}

  // parser_expr.cpp
  expr_ptr parse_expression(bool with_condexpr = true);
  expr_ptr parse_tuple_or_expression(bool with_condexpr = true);
  expr_ptr parse_assign_target(bool allow_namespace_attr);
  // "f1(args)|f2|..." applied to `input`.
  expr_ptr parse_filter_chain(expr_ptr input);

  // parser.cpp
  stmt_list parse_until(const std::vector<std::string>& end_tags, std::string* found);

 protected:
  std::vector<token> toks_;
  size_t p_ = 0;
  int nesting_ = 0;
  int loop_depth_ = 0;

  const token& cur() const { return toks_[p_]; }
  const token& peek(size_t n = 1) const { return toks_[std::min(p_ + n, toks_.size() - 1)]; }
  const token& advance() { return toks_[p_ < toks_.size() - 1 ? p_++ : p_]; }
  bool at_op(const char* op) const { return cur().type == tok::op && cur().text == op; }
  bool at_name(const char* n) const { return cur().type == tok::name && cur().text == n; }
  bool accept_op(const char* op);
  bool accept_name(const char* n);
  void expect_op(const char* op);
  void expect_name(const char* n);
  std::string expect_identifier();
  void expect_block_end();
  [[noreturn]] void error(const std::string& msg) const;
  [[noreturn]] void error_at(const token& t, const std::string& msg) const;
  std::string describe(const token& t) const;
  expr_ptr make(expr_kind kind, const token& at) const;
  void check_depth(const expr& e) const;

  // A guard for recursion: counts nesting and fails past max_nesting.
  struct nest_guard {
    parser_state& p;
    explicit nest_guard(parser_state& ps);
    ~nest_guard() { --p.nesting_; }
  };

 private:
  expr_ptr parse_condexpr();
  expr_ptr parse_or();
  expr_ptr parse_and();
  expr_ptr parse_not();
  expr_ptr parse_compare();
  expr_ptr parse_math1();
  expr_ptr parse_concat();
  expr_ptr parse_math2();
  expr_ptr parse_pow();
  expr_ptr parse_unary(bool with_filter);
  expr_ptr parse_primary();
  expr_ptr parse_sequence(expr_kind kind, const char* close);
  expr_ptr parse_dict();
  expr_ptr parse_postfix(expr_ptr node);
  expr_ptr parse_subscript(expr_ptr node);
  expr_ptr parse_filter_expr(expr_ptr node);
  expr_ptr parse_filter(expr_ptr node);
  expr_ptr parse_test(expr_ptr node);
  void parse_call_args(expr& call);
  expr_ptr binary(const token& at, std::string op, expr_ptr l, expr_ptr r) const;
};

}  // namespace tandem::chat_detail
