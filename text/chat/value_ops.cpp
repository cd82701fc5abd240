// Python's equality, ordering, str() and repr() for template values.
#include <charconv>
#include <cmath>

#include "value.hpp"

namespace tandem::chat_detail {

bool equals(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type() == kind::floating || b.type() == kind::floating) return a.as_double() == b.as_double();
    return a.as_int() == b.as_int();
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case kind::undefined:
    case kind::none: return true;
    case kind::string: return a.as_string() == b.as_string();
    case kind::list: {
      const auto& x = a.as_list();
      const auto& y = b.as_list();
      if (x.size() != y.size() || a.is_tuple() != b.is_tuple()) return false;
      for (size_t i = 0; i < x.size(); ++i)
        if (!equals(x[i], y[i])) return false;
      return true;
    }
    case kind::dict: {
      const auto& x = a.as_dict();
      const auto& y = b.as_dict();
      if (&x == &y) return true;
      if (x.is_namespace || y.is_namespace || x.entries.size() != y.entries.size()) return false;
      for (const auto& [k, v] : x.entries) {
        const value* o = y.find(k);
        if (!o || !equals(v, *o)) return false;
      }
      return true;
    }
    case kind::callable: return &a.as_callable() == &b.as_callable();
    default: return false;
  }
}

int compare(const value& a, const value& b) {
  if (a.is_number() && b.is_number()) {
    if (a.type() == kind::floating || b.type() == kind::floating) {
      double x = a.as_double(), y = b.as_double();
      return x < y ? -1 : (x > y ? 1 : 0);
    }
    int64_t x = a.as_int(), y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  if (a.is_string() && b.is_string()) {
    int c = a.as_string().compare(b.as_string());  // byte order == code point order in UTF-8
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list()) {
    const auto& x = a.as_list();
    const auto& y = b.as_list();
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (equals(x[i], y[i])) continue;
      return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  require_defined(a);
  require_defined(b);
  fail("'<' not supported between instances of '" + a.type_name() + "' and '" + b.type_name() + "'");
}

// Python's repr(float): shortest round-trip digits, fixed notation for exponents in
// [-4, 16), scientific otherwise.
std::string float_repr(double d) {
  if (std::isnan(d)) return "nan";
  if (std::isinf(d)) return d < 0 ? "-inf" : "inf";
  char buf[64];
  auto res = std::to_chars(buf, buf + sizeof buf, d, std::chars_format::scientific);
  std::string sci(buf, res.ptr);
  bool neg = sci[0] == '-';
  if (neg) sci.erase(0, 1);
  size_t e = sci.find('e');
  int exp = std::stoi(sci.substr(e + 1));
  std::string digits;
  for (char c : sci.substr(0, e))
    if (c != '.') digits += c;
  std::string out;
  if (exp >= -4 && exp < 16) {
    if (exp < 0) {
      out = "0." + std::string(static_cast<size_t>(-exp - 1), '0') + digits;
    } else if (static_cast<size_t>(exp) + 1 >= digits.size()) {
      out = digits + std::string(static_cast<size_t>(exp) + 1 - digits.size(), '0') + ".0";
    } else {
      out = digits.substr(0, static_cast<size_t>(exp) + 1) + "." + digits.substr(static_cast<size_t>(exp) + 1);
    }
  } else {
    out = digits.substr(0, 1);
    if (digits.size() > 1) out.append(1, '.').append(digits, 1);
    char eb[16];
    std::snprintf(eb, sizeof eb, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    out += eb;
  }
  return neg ? "-" + out : out;
}

static std::string string_repr(const std::string& s) {
  bool has_single = s.find('\'') != std::string::npos;
  bool has_double = s.find('"') != std::string::npos;
  char q = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, q);
  for (unsigned char c : s) {
    if (c == '\\') out += "\\\\";
    else if (c == static_cast<unsigned char>(q)) out += std::string("\\") + q;
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c < 0x20 || c == 0x7f) {
      char b[8];
      std::snprintf(b, sizeof b, "\\x%02x", c);
      out += b;
    } else {
      out += static_cast<char>(c);
    }
  }
  out += q;
  return out;
}

static std::string repr_at(const value& v, int depth);

std::string to_repr(const value& v) { return repr_at(v, 0); }

// Containers can hold themselves through a namespace, so depth is bounded.
static std::string repr_at(const value& v, int depth) {
  if (depth > 100) fail("value nested too deeply to print");
  switch (v.type()) {
    case kind::undefined: return "Undefined";
    case kind::string: return string_repr(v.as_string());
    case kind::list: {
      std::string out = v.is_tuple() ? "(" : "[";
      const auto& l = v.as_list();
      for (size_t i = 0; i < l.size(); ++i) {
        out += (i ? ", " : "") + repr_at(l[i], depth + 1);
        check_string_size(out.size());
      }
      if (!v.is_tuple()) return out + "]";
      return out + (l.size() == 1 ? ",)" : ")");
    }
    case kind::dict: {
      const auto& d = v.as_dict();
      std::string out = d.is_namespace ? "<Namespace {" : "{";
      for (size_t i = 0; i < d.entries.size(); ++i) {
        out += (i ? ", " : "") + repr_at(d.entries[i].first, depth + 1) + ": " + repr_at(d.entries[i].second, depth + 1);
        check_string_size(out.size());
      }
      return out + (d.is_namespace ? "}>" : "}");
    }
    default: return to_str(v);
  }
}

std::string to_str(const value& v) {
  switch (v.type()) {
    case kind::undefined: return "";
    case kind::none: return "None";
    case kind::boolean: return v.as_bool() ? "True" : "False";
    case kind::integer: return std::to_string(v.as_int());
    case kind::floating: return float_repr(v.as_double());
    case kind::string: return v.as_string();
    case kind::callable: return "<function " + v.as_callable().name + ">";
    default: return to_repr(v);
  }
}

}  // namespace tandem::chat_detail
