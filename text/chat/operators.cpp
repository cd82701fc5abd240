// Python's arithmetic and membership on template values.
#include <cmath>

#include "builtins.hpp"
#include "utf8.hpp"

namespace tandem::chat_detail {
namespace {

[[noreturn]] void unsupported(const std::string& op, const value& a, const value& b) {
  require_defined(a);
  require_defined(b);
  fail("unsupported operand type(s) for " + op + ": '" + a.type_name() + "' and '" + b.type_name() + "'");
}

bool is_int(const value& v) { return v.type() == kind::integer || v.type() == kind::boolean; }

value repeat(const value& seq, int64_t n) {
  size_t unit = seq.is_string() ? seq.as_string().size() : seq.as_list().size();
  if (n <= 0 || unit == 0) return seq.is_string() ? value::string("") : value::list({});
  size_t limit = seq.is_string() ? max_string_bytes : max_list_items;
  if (static_cast<uint64_t>(n) > limit / unit) fail("repetition result is too large");
  if (seq.is_string()) {
    std::string out;
    for (int64_t i = 0; i < n; ++i) out += seq.as_string();
    return value::string(std::move(out));
  }
  value_list out;
  for (int64_t i = 0; i < n; ++i) out.insert(out.end(), seq.as_list().begin(), seq.as_list().end());
  return seq.is_tuple() ? value::tuple(std::move(out)) : value::list(std::move(out));
}

value int_result(__int128 r) {
  if (r > INT64_MAX || r < INT64_MIN) fail("integer result out of range");
  return value::integer(static_cast<int64_t>(r));
}

value int_pow(int64_t base, int64_t exp) {
  if (exp < 0) return value::floating(std::pow(static_cast<double>(base), static_cast<double>(exp)));
  __int128 r = 1;
  for (int64_t i = 0; i < exp; ++i) {
    r *= base;
    if (r > INT64_MAX || r < INT64_MIN) fail("integer result out of range");
    if (r == 0 || r == 1) break;
  }
  if (r == 1 && base == -1 && exp % 2 == 1) r = -1;
  return value::integer(static_cast<int64_t>(r));
}

value arithmetic(const std::string& op, const value& a, const value& b) {
  if (!a.is_number() || !b.is_number()) unsupported(op, a, b);
  if (is_int(a) && is_int(b)) {
    __int128 x = a.as_int(), y = b.as_int();
    if (op == "+") return int_result(x + y);
    if (op == "-") return int_result(x - y);
    if (op == "*") return int_result(x * y);
    if (op == "**") return int_pow(a.as_int(), b.as_int());
    if (y == 0) fail(op == "/" ? "division by zero" : "integer division or modulo by zero");
    if (op == "/") return value::floating(static_cast<double>(x) / static_cast<double>(y));
    __int128 q = x / y, m = x % y;
    if (m != 0 && ((m < 0) != (y < 0))) {
      --q;
      m += y;
    }
    return int_result(op == "//" ? q : m);
  }
  double x = a.as_double(), y = b.as_double();
  if (op == "+") return value::floating(x + y);
  if (op == "-") return value::floating(x - y);
  if (op == "*") return value::floating(x * y);
  if (op == "**") return value::floating(std::pow(x, y));
  if (y == 0) fail("float division by zero");
  if (op == "/") return value::floating(x / y);
  double m = std::fmod(x, y);
  if (m != 0 && ((m < 0) != (y < 0))) m += y;
  if (op == "%") return value::floating(m);
  double mod = std::fmod(x, y);  // CPython's float floor division
  double div = (x - mod) / y;
  if (mod != 0 && ((y < 0) != (mod < 0))) div -= 1.0;
  double fl = std::floor(div);
  if (div - fl > 0.5) fl += 1.0;
  return value::floating(fl);
}

// "%s" % args for the conversions templates use (%s %r %d %i %f %%).
value percent_format(const std::string& fmt, const value& args) {
  value_list items = args.is_tuple() ? args.as_list() : value_list{args};
  std::string out;
  size_t next = 0;
  for (size_t i = 0; i < fmt.size(); ++i) {
    if (fmt[i] != '%') {
      out += fmt[i];
      continue;
    }
    if (++i >= fmt.size()) fail("incomplete format");
    char c = fmt[i];
    if (c == '%') {
      out += '%';
      continue;
    }
    if (next >= items.size()) fail("not enough arguments for format string");
    const value& v = items[next++];
    check_string_size(out.size());
    if (c == 's') out += to_str(v);
    else if (c == 'r') out += to_repr(v);
    else if ((c == 'd' || c == 'i') && v.is_number() && std::fabs(v.as_double()) < 9.2e18) out += std::to_string(static_cast<int64_t>(v.as_double()));
    else if (c == 'f' && v.is_number()) out += std::to_string(v.as_double());
    else fail(std::string("unsupported format character '") + c + "'");
  }
  if (next < items.size()) fail("not all arguments converted during string formatting");
  return value::string(std::move(out));
}

}  // namespace

value binary_op(const std::string& op, const value& a, const value& b) {
  if (op == "~") {
    std::string x = to_str(a), y = to_str(b);
    check_string_size(x.size() + y.size());
    return value::string(x + y);
  }
  if (op == "+") {
    if (a.is_string() && b.is_string()) {
      check_string_size(a.as_string().size() + b.as_string().size());
      return value::string(a.as_string() + b.as_string());
    }
    if (a.is_list() && b.is_list()) {
      check_list_size(a.as_list().size() + b.as_list().size());
      if (a.is_tuple() != b.is_tuple())
        fail(std::string("can only concatenate ") + a.type_name() + " (not \"" + b.type_name() + "\") to " + a.type_name());
      value_list out = a.as_list();
      out.insert(out.end(), b.as_list().begin(), b.as_list().end());
      return a.is_tuple() ? value::tuple(std::move(out)) : value::list(std::move(out));
    }
    if (a.is_string() && b.is_number())
      fail("can only concatenate str (not \"" + b.type_name() + "\") to str");
  }
  if (op == "*") {
    if ((a.is_string() || a.is_list()) && is_int(b)) return repeat(a, b.as_int());
    if ((b.is_string() || b.is_list()) && is_int(a)) return repeat(b, a.as_int());
  }
  if (op == "%" && a.is_string()) return percent_format(a.as_string(), b);
  return arithmetic(op, a, b);
}

value negate(const value& v, bool minus) {
  require_defined(v);
  if (v.type() == kind::floating) return value::floating(minus ? -v.as_double() : v.as_double());
  if (is_int(v)) return int_result(minus ? -static_cast<__int128>(v.as_int()) : v.as_int());
  fail(std::string("bad operand type for unary ") + (minus ? "-" : "+") + ": '" + v.type_name() + "'");
}

bool contains(const value& container, const value& item) {
  switch (container.type()) {
    case kind::undefined: return false;
    case kind::string:
      if (!item.is_string()) {
        require_defined(item);
        fail("'in <string>' requires string as left operand, not " + item.type_name());
      }
      return container.as_string().find(item.as_string()) != std::string::npos;
    case kind::list:
      for (const auto& x : container.as_list())
        if (equals(x, item)) return true;
      return false;
    case kind::dict: return container.as_dict().find(item) != nullptr;
    default: fail("argument of type '" + container.type_name() + "' is not iterable");
  }
}

}  // namespace tandem::chat_detail
