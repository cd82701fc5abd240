// Statements and the cursor helpers.
#include "parser.hpp"

#include "builtins.hpp"
#include "parser_state.hpp"

namespace tandem::chat_detail {

parser_state::nest_guard::nest_guard(parser_state& ps) : p(ps) {
  if (++p.nesting_ > max_nesting) {
    --p.nesting_;
    p.error("template nested too deeply (more than " + std::to_string(max_nesting) + " levels)");
  }
}

std::string parser_state::describe(const token& t) const {
  switch (t.type) {
    case tok::eof: return "end of template";
    case tok::block_end: return "end of statement block";
    case tok::var_end: return "end of print statement";
    case tok::block_begin: return "begin of statement block";
    case tok::var_begin: return "begin of print statement";
    case tok::text: return "template data";
    case tok::string: return "string literal";
    case tok::integer:
    case tok::floating: return "number '" + t.text + "'";
    default: return "'" + t.text + "'";
  }
}

void parser_state::error(const std::string& msg) const { error_at(cur(), msg); }

void parser_state::error_at(const token& t, const std::string& msg) const {
  throw chat_template_error(msg, t.line, t.col);
}

bool parser_state::accept_op(const char* op) {
  if (!at_op(op)) return false;
  advance();
  return true;
}

bool parser_state::accept_name(const char* n) {
  if (!at_name(n)) return false;
  advance();
  return true;
}

void parser_state::expect_op(const char* op) {
  if (!accept_op(op)) error("expected '" + std::string(op) + "', got " + describe(cur()));
}

void parser_state::expect_name(const char* n) {
  if (!accept_name(n)) error("expected '" + std::string(n) + "', got " + describe(cur()));
}

std::string parser_state::expect_identifier() {
  if (cur().type != tok::name) error("expected a name, got " + describe(cur()));
  return advance().text;
}

void parser_state::expect_block_end() {
  if (cur().type != tok::block_end) error("expected end of statement block, got " + describe(cur()));
  advance();
}

namespace {

class statement_parser : public parser_state {
 public:
  using parser_state::parser_state;

  stmt_ptr parse_statement() {
    nest_guard g(*this);
    const token& at = cur();
    if (at.type != tok::name) error("expected a statement name, got " + describe(at));
    const std::string& tag = at.text;
    if (tag == "for") return parse_for();
    if (tag == "if") return parse_if();
    if (tag == "set") return parse_set();
    if (tag == "macro") return parse_macro();
    if (tag == "filter") return parse_filter_block();
    if (tag == "generation") return parse_generation();
    if (tag == "break" || tag == "continue") return parse_loop_control();
    error("unknown tag '" + tag + "'");
  }

  stmt_ptr make_stmt(stmt_kind kind, const token& at) {
    auto s = std::make_unique<stmt>();
    s->kind = kind;
    s->line = at.line;
    s->col = at.col;
    return s;
  }

  stmt_ptr parse_for() {
    auto s = make_stmt(stmt_kind::for_, advance());
    s->target = parse_assign_target(false);
    expect_name("in");
    s->expr = parse_tuple_or_expression(false);
    if (accept_name("if")) s->condition = parse_expression();
    if (at_name("recursive")) error("recursive for loops are not supported");
    expect_block_end();
    std::string found;
    ++loop_depth_;
    s->body = parse_until({"endfor", "else"}, &found);
    --loop_depth_;
    if (found == "else") {
      advance();
      expect_block_end();
      s->else_body = parse_until({"endfor"}, &found);
    }
    advance();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_if() {
    auto s = make_stmt(stmt_kind::if_, advance());
    std::string found = "elif";
    while (found == "elif") {
      expr_ptr cond = parse_tuple_or_expression();
      expect_block_end();
      stmt_list body = parse_until({"elif", "else", "endif"}, &found);
      s->branches.emplace_back(std::move(cond), std::move(body));
      advance();
    }
    if (found == "else") {
      expect_block_end();
      s->else_body = parse_until({"endif"}, &found);
      advance();
    }
    expect_block_end();
    return s;
  }

  stmt_ptr parse_set() {
    const token& at = advance();
    expr_ptr target = parse_assign_target(true);
    if (accept_op("=")) {
      auto s = make_stmt(stmt_kind::set, at);
      s->target = std::move(target);
      s->expr = parse_tuple_or_expression();
      expect_block_end();
      return s;
    }
    auto s = make_stmt(stmt_kind::set_block, at);
    s->target = std::move(target);
    if (s->target->kind == expr_kind::tuple) error("a block set needs a single target");
    expect_block_end();
    std::string found;
    s->body = parse_until({"endset"}, &found);
    advance();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_macro() {
    auto s = make_stmt(stmt_kind::macro, advance());
    s->text = expect_identifier();
    expect_op("(");
    while (!at_op(")")) {
      if (!s->params.empty()) expect_op(",");
      if (at_op(")")) break;
      s->params.push_back(expect_identifier());
      s->defaults.push_back(accept_op("=") ? parse_expression() : nullptr);
    }
    expect_op(")");
    expect_block_end();
    std::string found;
    int saved = loop_depth_;
    loop_depth_ = 0;
    s->body = parse_until({"endmacro"}, &found);
    loop_depth_ = saved;
    advance();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_filter_block() {
    auto s = make_stmt(stmt_kind::filter_block, cur());
    advance();
    // The body's rendered text becomes the input of the filter chain at run time.
    auto input = make(expr_kind::name, cur());
    input->name = filter_body_name;
    s->expr = parse_filter_chain(std::move(input));
    expect_block_end();
    std::string found;
    s->body = parse_until({"endfilter"}, &found);
    advance();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_generation() {
    auto s = make_stmt(stmt_kind::body, advance());
    expect_block_end();
    std::string found;
    s->body = parse_until({"endgeneration"}, &found);
    advance();
    expect_block_end();
    return s;
  }

  stmt_ptr parse_loop_control() {
    const token& at = advance();
    if (loop_depth_ == 0) error_at(at, "'" + at.text + "' outside of a loop");
    auto s = make_stmt(at.text == "break" ? stmt_kind::break_ : stmt_kind::continue_, at);
    expect_block_end();
    return s;
  }
};

}  // namespace

stmt_list parser_state::parse_until(const std::vector<std::string>& end_tags, std::string* found) {
  stmt_list out;
  while (true) {
    const token& t = cur();
    if (t.type == tok::text) {
      auto s = std::make_unique<stmt>();
      s->kind = stmt_kind::text;
      s->text = advance().text;
      out.push_back(std::move(s));
    } else if (t.type == tok::var_begin) {
      auto s = std::make_unique<stmt>();
      s->kind = stmt_kind::output;
      s->line = t.line;
      s->col = t.col;
      advance();
      s->expr = parse_tuple_or_expression();
      if (cur().type != tok::var_end) error("expected end of print statement, got " + describe(cur()));
      advance();
      out.push_back(std::move(s));
    } else if (t.type == tok::block_begin) {
      const token& name = peek();
      for (const auto& end : end_tags) {
        if (name.type == tok::name && name.text == end) {
          advance();
          *found = end;
          return out;
        }
      }
      advance();
      out.push_back(static_cast<statement_parser*>(this)->parse_statement());
    } else if (t.type == tok::eof) {
      if (end_tags.empty()) return out;
      std::string want;
      for (const auto& e : end_tags) want += (want.empty() ? "'" : " or '") + e + "'";
      error("unexpected end of template, expected " + want);
    } else {
      error("unexpected " + describe(t));
    }
  }
}

stmt_list parse_template(std::vector<token> tokens) {
  statement_parser p(std::move(tokens));
  return p.parse_until({}, nullptr);
}

}  // namespace tandem::chat_detail
