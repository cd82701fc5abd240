// Expressions, following jinja2's parser: condexpr > or > and > not > compare > + - >
// ~ > * / // % > ** > unary, with postfix access, filters and tests bound at the unary
// level.
#include "builtins.hpp"
#include "parser.hpp"
#include "parser_state.hpp"

namespace tandem::chat_detail {

expr_ptr parser_state::make(expr_kind kind, const token& at) const {
  auto e = std::make_unique<expr>();
  e->kind = kind;
  e->line = at.line;
  e->col = at.col;
  return e;
}

// Called once a node's children are attached: left-nested chains (a+b+c..., x|f|g...)
// grow without parser recursion, so height is measured here.
void parser_state::check_depth(const expr& e) const {
  if (e.depth > max_nesting) throw chat_template_error("expression nested too deeply", e.line, e.col);
}

static void attach(expr& parent, expr_ptr child) {
  if (child) parent.depth = std::max(parent.depth, child->depth + 1);
  parent.args.push_back(std::move(child));
}

expr_ptr parser_state::binary(const token& at, std::string op, expr_ptr l, expr_ptr r) const {
  auto e = make(expr_kind::binary, at);
  e->name = std::move(op);
  attach(*e, std::move(l));
  attach(*e, std::move(r));
  check_depth(*e);
  return e;
}

expr_ptr parser_state::parse_tuple_or_expression(bool with_condexpr) {
  const token& start = cur();
  expr_ptr first = parse_expression(with_condexpr);
  if (!at_op(",")) return first;
  auto t = make(expr_kind::tuple, start);
  attach(*t, std::move(first));
  while (accept_op(",")) {
    if (cur().type == tok::block_end || cur().type == tok::var_end || at_op(")") || at_name("if")) break;
    attach(*t, parse_expression(with_condexpr));
  }
  check_depth(*t);
  return t;
}

expr_ptr parser_state::parse_assign_target(bool allow_namespace_attr) {
  const token& start = cur();
  auto one = [&]() {
    const token& at = cur();
    std::string name = expect_identifier();
    if (allow_namespace_attr && at_op(".")) {
      advance();
      auto a = make(expr_kind::attr, at);
      auto base = make(expr_kind::name, at);
      base->name = name;
      attach(*a, std::move(base));
      a->name = expect_identifier();
      return a;
    }
    auto n = make(expr_kind::name, at);
    n->name = name;
    return n;
  };
  bool paren = accept_op("(");
  expr_ptr first = one();
  if (!at_op(",") && !paren) return first;
  auto t = make(expr_kind::tuple, start);
  attach(*t, std::move(first));
  while (accept_op(",")) {
    if (at_op(")") || at_op("=") || at_name("in")) break;
    attach(*t, one());
  }
  if (paren) expect_op(")");
  return t;
}

expr_ptr parser_state::parse_expression(bool with_condexpr) {
  nest_guard g(*this);
  return with_condexpr ? parse_condexpr() : parse_or();
}

expr_ptr parser_state::parse_condexpr() {
  expr_ptr e = parse_or();
  while (at_name("if")) {
    const token& at = advance();
    auto c = make(expr_kind::condexpr, at);
    expr_ptr cond = parse_or();
    expr_ptr other = accept_name("else") ? parse_condexpr() : nullptr;
    attach(*c, std::move(e));
    attach(*c, std::move(cond));
    attach(*c, std::move(other));
    check_depth(*c);
    e = std::move(c);
  }
  return e;
}

expr_ptr parser_state::parse_or() {
  expr_ptr l = parse_and();
  while (at_name("or")) {
    const token& at = advance();
    l = binary(at, "or", std::move(l), parse_and());
  }
  return l;
}

expr_ptr parser_state::parse_and() {
  expr_ptr l = parse_not();
  while (at_name("and")) {
    const token& at = advance();
    l = binary(at, "and", std::move(l), parse_not());
  }
  return l;
}

expr_ptr parser_state::parse_not() {
  if (!at_name("not")) return parse_compare();
  nest_guard g(*this);
  const token& at = advance();
  auto e = make(expr_kind::unary, at);
  e->name = "not";
  attach(*e, parse_not());
  return e;
}

expr_ptr parser_state::parse_compare() {
  const token& start = cur();
  expr_ptr first = parse_math1();
  expr_ptr chain;
  while (true) {
    std::string op;
    if (cur().type == tok::op && (at_op("==") || at_op("!=") || at_op("<") || at_op("<=") || at_op(">") || at_op(">="))) {
      op = advance().text;
    } else if (accept_name("in")) {
      op = "in";
    } else if (at_name("not") && peek().type == tok::name && peek().text == "in") {
      advance();
      advance();
      op = "not in";
    } else {
      break;
    }
    if (!chain) {
      chain = make(expr_kind::compare, start);
      attach(*chain, std::move(first));
    }
    chain->ops.push_back(op);
    attach(*chain, parse_math1());
    check_depth(*chain);
  }
  return chain ? std::move(chain) : std::move(first);
}

expr_ptr parser_state::parse_math1() {
  expr_ptr l = parse_concat();
  while (at_op("+") || at_op("-")) {
    const token& at = advance();
    l = binary(at, at.text, std::move(l), parse_concat());
  }
  return l;
}

expr_ptr parser_state::parse_concat() {
  expr_ptr l = parse_math2();
  while (at_op("~")) {
    const token& at = advance();
    l = binary(at, "~", std::move(l), parse_math2());
  }
  return l;
}

expr_ptr parser_state::parse_math2() {
  expr_ptr l = parse_pow();
  while (at_op("*") || at_op("/") || at_op("//") || at_op("%")) {
    const token& at = advance();
    l = binary(at, at.text, std::move(l), parse_pow());
  }
  return l;
}

expr_ptr parser_state::parse_pow() {
  expr_ptr l = parse_unary(true);
  while (at_op("**")) {
    const token& at = advance();
    l = binary(at, "**", std::move(l), parse_unary(true));
  }
  return l;
}

expr_ptr parser_state::parse_unary(bool with_filter) {
  nest_guard g(*this);
  expr_ptr node;
  if (at_op("-") || at_op("+")) {
    const token& at = advance();
    node = make(expr_kind::unary, at);
    node->name = at.text;
    attach(*node, parse_unary(false));
  } else {
    node = parse_primary();
  }
  node = parse_postfix(std::move(node));
  return with_filter ? parse_filter_expr(std::move(node)) : std::move(node);
}

expr_ptr parser_state::parse_primary() {
  const token& t = cur();
  if (t.type == tok::name) {
    advance();
    if (t.text == "true" || t.text == "True" || t.text == "false" || t.text == "False") {
      auto e = make(expr_kind::literal, t);
      e->lit = value::boolean(t.text[0] == 't' || t.text[0] == 'T');
      return e;
    }
    auto e = make(t.text == "none" || t.text == "None" ? expr_kind::literal : expr_kind::name, t);
    if (e->kind == expr_kind::literal) e->lit = value::none();
    else e->name = t.text;
    return e;
  }
  if (t.type == tok::string) {
    std::string s;
    while (cur().type == tok::string) s += advance().text;  // adjacent literals concatenate
    auto e = make(expr_kind::literal, t);
    e->lit = value::string(std::move(s));
    return e;
  }
  if (t.type == tok::integer || t.type == tok::floating) {
    advance();
    auto e = make(expr_kind::literal, t);
    e->lit = t.type == tok::integer ? value::integer(t.int_value) : value::floating(t.float_value);
    return e;
  }
  if (accept_op("(")) {
    if (accept_op(")")) return make(expr_kind::tuple, t);
    expr_ptr inner = parse_tuple_or_expression();
    expect_op(")");
    return inner;
  }
  if (accept_op("[")) return parse_sequence(expr_kind::list, "]");
  if (accept_op("{")) return parse_dict();
  error_at(t, "unexpected " + describe(t) + ", expected an expression");
}

expr_ptr parser_state::parse_sequence(expr_kind kind, const char* close) {
  auto e = make(kind, toks_[p_ - 1]);
  while (!at_op(close)) {
    if (!e->args.empty()) expect_op(",");
    if (at_op(close)) break;
    attach(*e, parse_expression());
  }
  expect_op(close);
  check_depth(*e);
  return e;
}

expr_ptr parser_state::parse_dict() {
  auto e = make(expr_kind::dict, toks_[p_ - 1]);
  while (!at_op("}")) {
    if (!e->args.empty()) expect_op(",");
    if (at_op("}")) break;
    attach(*e, parse_expression());
    expect_op(":");
    attach(*e, parse_expression());
  }
  expect_op("}");
  check_depth(*e);
  return e;
}

expr_ptr parser_state::parse_postfix(expr_ptr node) {
  while (true) {
    const token& at = cur();
    if (at_op(".")) {
      advance();
      if (cur().type == tok::integer) {
        auto s = make(expr_kind::subscript, at);
        auto idx = make(expr_kind::literal, cur());
        idx->lit = value::integer(advance().int_value);
        attach(*s, std::move(node));
        attach(*s, std::move(idx));
        node = std::move(s);
      } else {
        auto a = make(expr_kind::attr, at);
        a->name = expect_identifier();
        attach(*a, std::move(node));
        node = std::move(a);
      }
    } else if (at_op("[")) {
      advance();
      node = parse_subscript(std::move(node));
    } else if (at_op("(")) {
      advance();
      auto c = make(expr_kind::call, at);
      attach(*c, std::move(node));
      parse_call_args(*c);
      node = std::move(c);
    } else {
      return node;
    }
    // Point errors of a.b(...)[i] at the start of the whole expression.
    node->line = node->args[0]->line;
    node->col = node->args[0]->col;
    check_depth(*node);
  }
}

expr_ptr parser_state::parse_subscript(expr_ptr node) {
  const token& at = toks_[p_ - 1];
  expr_ptr parts[3];
  int colons = 0;
  if (!at_op(":")) parts[0] = parse_expression();
  while (colons < 2 && accept_op(":")) {
    ++colons;
    if (!at_op(":") && !at_op("]")) parts[colons] = parse_expression();
  }
  expect_op("]");
  auto e = make(colons ? expr_kind::slice : expr_kind::subscript, at);
  attach(*e, std::move(node));
  attach(*e, std::move(parts[0]));
  if (colons) {
    attach(*e, std::move(parts[1]));
    attach(*e, std::move(parts[2]));
  }
  return e;
}

void parser_state::parse_call_args(expr& call) {
  while (!at_op(")")) {
    if (call.args.size() + call.kwargs.size() > 1) expect_op(",");
    if (at_op(")")) break;
    if (cur().type == tok::name && peek().type == tok::op && peek().text == "=") {
      std::string key = advance().text;
      advance();
      expr_ptr v = parse_expression();
      call.depth = std::max(call.depth, v->depth + 1);
      call.kwargs.emplace_back(std::move(key), std::move(v));
    } else {
      if (!call.kwargs.empty()) error("positional argument follows keyword argument");
      attach(call, parse_expression());
    }
  }
  expect_op(")");
}

expr_ptr parser_state::parse_filter_expr(expr_ptr node) {
  while (true) {
    if (at_op("|")) {
      advance();
      node = parse_filter(std::move(node));
    } else if (at_name("is")) {
      advance();
      node = parse_test(std::move(node));
    } else if (at_op("(")) {
      node = parse_postfix(std::move(node));
    } else {
      return node;
    }
    check_depth(*node);
  }
}

expr_ptr parser_state::parse_filter_chain(expr_ptr input) {
  expr_ptr node = parse_filter(std::move(input));
  while (accept_op("|")) node = parse_filter(std::move(node));
  return node;
}

expr_ptr parser_state::parse_filter(expr_ptr node) {
  const token& at = cur();
  auto f = make(expr_kind::filter, at);
  f->name = expect_identifier();
  while (at_op(".")) {
    advance();
    f->name += "." + expect_identifier();
  }
  if (!is_filter(f->name)) error_at(at, "no filter named '" + f->name + "'");
  attach(*f, std::move(node));
  if (accept_op("(")) parse_call_args(*f);
  return f;
}

expr_ptr parser_state::parse_test(expr_ptr node) {
  const token& at = cur();
  auto t = make(expr_kind::test, at);
  t->negated = accept_name("not");
  const token& name_tok = cur();
  t->name = expect_identifier();
  if (!is_test(t->name)) error_at(name_tok, "no test named '" + t->name + "'");
  attach(*t, std::move(node));
  if (accept_op("(")) {
    parse_call_args(*t);
  } else if ((cur().type == tok::name || cur().type == tok::string || cur().type == tok::integer ||
              cur().type == tok::floating || at_op("[") || at_op("{")) &&
             !at_name("else") && !at_name("or") && !at_name("and") && !at_name("if") && !at_name("in") &&
             !at_name("is") && !at_name("not")) {
    nest_guard g(*this);
    attach(*t, parse_postfix(parse_primary()));
  }
  return t;
}

}  // namespace tandem::chat_detail
