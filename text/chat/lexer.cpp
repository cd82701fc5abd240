#include "lexer.hpp"

#include <algorithm>
#include <cstring>

#include "tandem/chat_template.hpp"
#include "utf8.hpp"

namespace tandem::chat_detail {
namespace {

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
bool is_name_start(char c) { return std::isalpha(static_cast<unsigned char>(c)) || c == '_'; }
bool is_name_char(char c) { return std::isalnum(static_cast<unsigned char>(c)) || c == '_'; }
bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Newlines become "\n" and one trailing newline goes, as jinja2's lexer does.
std::string normalize(const std::string& src) {
  std::string out;
  out.reserve(src.size());
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i] == '\r') {
      out += '\n';
      if (i + 1 < src.size() && src[i + 1] == '\n') ++i;
    } else {
      out += src[i];
    }
  }
  if (!out.empty() && out.back() == '\n') out.pop_back();
  return out;
}

class lexer {
 public:
  lexer(const std::string& src, const lexer_options& opt) : src_(normalize(src)), opt_(opt) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i)
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
  }

  std::vector<token> run() {
    while (pos_ < src_.size()) {
      size_t start = find_tag(pos_);
      if (start == std::string::npos) {
        emit_text(src_.substr(pos_));
        break;
      }
      lex_tag(start);
    }
    token eof{tok::eof, "", 0, 0};
    position(src_.size(), eof.line, eof.col);
    out_.push_back(eof);
    return std::move(out_);
  }

 private:
  const std::string src_;
  lexer_options opt_;
  std::vector<size_t> line_starts_;
  std::vector<token> out_;
  size_t pos_ = 0;
  bool line_starting_ = true;

  void position(size_t p, int& line, int& col) const {
    auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), p);
    size_t idx = static_cast<size_t>(it - line_starts_.begin()) - 1;
    line = static_cast<int>(idx) + 1;
    col = static_cast<int>(p - line_starts_[idx]) + 1;
  }

  [[noreturn]] void error_at(size_t p, const std::string& msg) const {
    int line, col;
    position(p, line, col);
    throw chat_template_error(msg, line, col);
  }

  size_t find_tag(size_t from) const {
    for (size_t i = from; i + 1 < src_.size(); ++i)
      if (src_[i] == '{' && (src_[i + 1] == '{' || src_[i + 1] == '%' || src_[i + 1] == '#')) return i;
    return std::string::npos;
  }

  void emit_text(std::string text) {
    if (text.empty()) return;
    token t{tok::text, std::move(text), 0, 0};
    out_.push_back(std::move(t));
  }

  void push(tok type, std::string text, size_t p) {
    token t{type, std::move(text), 0, 0};
    position(p, t.line, t.col);
    out_.push_back(std::move(t));
  }

  // Applies `-` and lstrip_blocks to the text that precedes a tag.
  std::string strip_before(std::string text, char kind, char sign) const {
    if (sign == '-') {
      size_t e = text.size();
      while (e > 0 && is_space(text[e - 1])) --e;
      text.resize(e);
    } else if (sign != '+' && opt_.lstrip_blocks && kind != '{') {
      size_t nl = text.rfind('\n');
      size_t l_pos = nl == std::string::npos ? 0 : nl + 1;
      if (l_pos > 0 || line_starting_) {
        bool ws = l_pos < text.size();
        for (size_t i = l_pos; i < text.size(); ++i) ws = ws && is_space(text[i]);
        if (ws) text.resize(l_pos);
      }
    }
    return text;
  }

  // After a closing tag: `-` eats all whitespace, trim_blocks eats one newline.
  void after_close(size_t end, char sign, bool trims) {
    size_t p = end;
    if (sign == '-') {
      while (p < src_.size() && is_space(src_[p])) ++p;
    } else if (sign != '+' && trims && opt_.trim_blocks && p < src_.size() && src_[p] == '\n') {
      ++p;
    }
    pos_ = p;
    line_starting_ = p > 0 && src_[p - 1] == '\n';
  }

  void lex_tag(size_t start) {
    char kind = src_[start + 1];
    char sign = start + 2 < src_.size() ? src_[start + 2] : 0;
    if (sign != '-' && sign != '+') sign = 0;
    emit_text(strip_before(src_.substr(pos_, start - pos_), kind, sign));
    size_t p = start + 2 + (sign ? 1 : 0);
    if (kind == '#') return lex_comment(start, p);
    push(kind == '{' ? tok::var_begin : tok::block_begin, "", start);
    lex_expression(kind, p);
  }

  void lex_comment(size_t start, size_t p) {
    size_t end = src_.find("#}", p);
    if (end == std::string::npos) error_at(start, "missing end of comment tag");
    char sign = end > p && (src_[end - 1] == '-' || src_[end - 1] == '+') ? src_[end - 1] : 0;
    after_close(end + 2, sign, true);
  }

  // Returns the length of a closing marker at p ("-%}", "%}", ...) or 0.
  size_t closing_at(char kind, size_t p, char& sign) const {
    const char* close = kind == '{' ? "}}" : "%}";
    sign = 0;
    if (src_.compare(p, 2, close) == 0) return 2;
    if (p + 2 < src_.size() && src_.compare(p + 1, 2, close) == 0 &&
        (src_[p] == '-' || (src_[p] == '+' && kind == '%'))) {
      sign = src_[p];
      return 3;
    }
    return 0;
  }

  void lex_expression(char kind, size_t p) {
    std::string brackets;
    while (true) {
      while (p < src_.size() && is_space(src_[p])) ++p;
      if (p >= src_.size()) error_at(p, kind == '{' ? "unexpected end of template, expected '}}'" : "unexpected end of template, expected '%}'");
      char sign = 0;
      if (brackets.empty()) {
        if (size_t n = closing_at(kind, p, sign)) {
          push(kind == '{' ? tok::var_end : tok::block_end, "", p);
          after_close(p + n, sign, kind == '%');
          return;
        }
      }
      p = lex_one(p, brackets);
    }
  }

  size_t lex_one(size_t p, std::string& brackets) {
    char c = src_[p];
    if (is_name_start(c)) {
      size_t e = p;
      while (e < src_.size() && is_name_char(src_[e])) ++e;
      push(tok::name, src_.substr(p, e - p), p);
      return e;
    }
    if (is_digit(c)) return lex_number(p);
    if (c == '\'' || c == '"') return lex_string(p);
    static const char* two[] = {"//", "**", "==", "!=", "<=", ">="};
    for (const char* op : two) {
      if (src_.compare(p, 2, op) == 0) {
        push(tok::op, op, p);
        return p + 2;
      }
    }
    if (std::strchr("+-*/%~[](){}<>=.:|,;", c) == nullptr) error_at(p, std::string("unexpected char '") + c + "'");
    if (c == '(' || c == '[' || c == '{') brackets += c;
    if (c == ')' || c == ']' || c == '}') {
      char open = c == ')' ? '(' : (c == ']' ? '[' : '{');
      if (brackets.empty()) error_at(p, std::string("unexpected '") + c + "'");
      if (brackets.back() != open) error_at(p, std::string("unexpected '") + c + "'");
      brackets.pop_back();
    }
    push(tok::op, std::string(1, c), p);
    return p + 1;
  }

  size_t digits(size_t p) const {
    while (p < src_.size() && (is_digit(src_[p]) || (src_[p] == '_' && p + 1 < src_.size() && is_digit(src_[p + 1])))) ++p;
    return p;
  }

  size_t lex_number(size_t p) {
    size_t e = digits(p);
    bool after_dot = p > 0 && src_[p - 1] == '.';
    bool is_float = false;
    if (!after_dot && e + 1 < src_.size() && src_[e] == '.' && is_digit(src_[e + 1])) {
      e = digits(e + 1);
      is_float = true;
    }
    if (!after_dot && e < src_.size() && (src_[e] == 'e' || src_[e] == 'E')) {
      size_t x = e + 1;
      if (x < src_.size() && (src_[x] == '+' || src_[x] == '-')) ++x;
      if (x < src_.size() && is_digit(src_[x])) {
        e = digits(x);
        is_float = true;
      }
    }
    std::string text;
    for (size_t i = p; i < e; ++i)
      if (src_[i] != '_') text += src_[i];
    push(is_float ? tok::floating : tok::integer, text, p);
    try {
      if (is_float) out_.back().float_value = std::stod(text);
      else out_.back().int_value = std::stoll(text);
    } catch (const std::exception&) {
      error_at(p, "number literal out of range: " + text);
    }
    return e;
  }

  size_t lex_string(size_t p) {
    char q = src_[p];
    size_t e = p + 1;
    while (e < src_.size() && src_[e] != q) e += src_[e] == '\\' ? 2 : 1;
    if (e >= src_.size()) error_at(p, "unterminated string literal");
    try {
      push(tok::string, decode_string_literal(src_.substr(p + 1, e - p - 1)), p);
    } catch (const chat_template_error& err) {
      error_at(p, err.message());
    }
    return e + 1;
  }
};

int hex_value(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Reads `n` hex digits at body[i..]; throws like Python's unicode-escape codec.
uint32_t read_hex(const std::string& body, size_t i, size_t n) {
  uint32_t cp = 0;
  for (size_t k = 0; k < n; ++k) {
    int h = i + k < body.size() ? hex_value(body[i + k]) : -1;
    if (h < 0) throw chat_template_error("truncated \\x, \\u or \\U escape in string literal");
    cp = cp * 16 + static_cast<uint32_t>(h);
  }
  return cp;
}

}  // namespace

std::string decode_string_literal(const std::string& body) {
  std::string out;
  for (size_t i = 0; i < body.size(); ++i) {
    char c = body[i];
    if (c != '\\' || i + 1 >= body.size()) {
      out += c;
      continue;
    }
    char n = body[++i];
    switch (n) {
      case '\n': break;
      case '\\': out += '\\'; break;
      case '\'': out += '\''; break;
      case '"': out += '"'; break;
      case 'a': out += '\a'; break;
      case 'b': out += '\b'; break;
      case 'f': out += '\f'; break;
      case 'n': out += '\n'; break;
      case 'r': out += '\r'; break;
      case 't': out += '\t'; break;
      case 'v': out += '\v'; break;
      case 'x': append_utf8(out, read_hex(body, i + 1, 2)); i += 2; break;
      case 'u': append_utf8(out, read_hex(body, i + 1, 4)); i += 4; break;
      case 'U': {
        uint32_t cp = read_hex(body, i + 1, 8);
        if (cp > 0x10FFFF) throw chat_template_error("illegal Unicode character in string literal");
        append_utf8(out, cp);
        i += 8;
        break;
      }
      default:
        if (n >= '0' && n <= '7') {
          uint32_t cp = 0;
          size_t k = 0;
          for (; k < 3 && i + k < body.size() && body[i + k] >= '0' && body[i + k] <= '7'; ++k)
            cp = cp * 8 + static_cast<uint32_t>(body[i + k] - '0');
          append_utf8(out, cp);
          i += k - 1;
        } else {
          out += '\\';
          out += n;
        }
    }
  }
  return out;
}

std::vector<token> tokenize(const std::string& source, const lexer_options& opt) {
  return lexer(source, opt).run();
}

}  // namespace tandem::chat_detail
