// Methods of str, dict and list that chat templates call. Mutating methods are refused
// the way jinja2's ImmutableSandboxedEnvironment refuses them.
#include "builtins.hpp"
#include "utf8.hpp"

namespace tandem::chat_detail {
namespace {

using method_impl = value (*)(const value& self, const call_args& args);

value bind(const value& self, const std::string& name, method_impl impl) {
  return value::function(name, [self, impl](const call_args& a) { return impl(self, a); });
}

value unsafe(const std::string& type, const std::string& name) {
  return value::undefined("access to attribute '" + name + "' of '" + type + "' object is unsafe.");
}

const std::string& str_arg(const call_args& a, size_t i, const char* name, const char* method) {
  static const std::string empty;
  value v = a.get(i, name);
  if (!v.is_string()) {
    require_defined(v);
    fail(std::string(method) + "() argument must be str, not " + v.type_name());
  }
  return v.as_string();
}

bool in_chars(uint32_t cp, const value& chars) {
  if (chars.is_undefined() || chars.is_none()) return is_unicode_space(cp);
  const std::string& set = chars.as_string();
  for (size_t i = 0; i < set.size();)
    if (next_codepoint(set, i) == cp) return true;
  return false;
}

value_list split_whitespace(const std::string& s, int64_t maxsplit) {
  value_list out;
  size_t i = 0;
  while (i < s.size()) {
    size_t j = i;
    if (is_unicode_space(next_codepoint(s, j))) {
      i = j;
      continue;
    }
    if (maxsplit >= 0 && static_cast<int64_t>(out.size()) == maxsplit) {
      out.push_back(value::string(str_strip(s.substr(i), false, true, value())));
      return out;
    }
    size_t start = i;
    while (i < s.size()) {
      size_t k = i;
      if (is_unicode_space(next_codepoint(s, k))) break;
      i = k;
    }
    out.push_back(value::string(s.substr(start, i - start)));
  }
  return out;
}

value m_split(const value& self, const call_args& a) {
  const std::string& s = self.as_string();
  value sep = a.get(0, "sep");
  value max = a.get(1, "maxsplit");
  int64_t maxsplit = max.is_number() ? max.as_int() : -1;
  if (sep.is_undefined() || sep.is_none()) return value::list(split_whitespace(s, maxsplit));
  const std::string& d = str_arg(a, 0, "sep", "split");
  if (d.empty()) fail("empty separator");
  value_list out;
  size_t pos = 0;
  while (maxsplit < 0 || static_cast<int64_t>(out.size()) < maxsplit) {
    size_t f = s.find(d, pos);
    if (f == std::string::npos) break;
    out.push_back(value::string(s.substr(pos, f - pos)));
    pos = f + d.size();
  }
  out.push_back(value::string(s.substr(pos)));
  return value::list(std::move(out));
}

value m_replace(const value& self, const call_args& a) {
  const std::string& s = self.as_string();
  const std::string& from = str_arg(a, 0, "old", "replace");
  const std::string& to = str_arg(a, 1, "new", "replace");
  value c = a.get(2, "count");
  int64_t count = c.is_number() ? c.as_int() : -1;
  std::string out;
  if (from.empty()) {  // Python inserts `to` around every character
    auto offs = codepoint_offsets(s);
    check_string_size(s.size() + offs.size() * to.size());
    for (size_t i = 0; i + 1 < offs.size() + 1; ++i) {
      if (count < 0 || static_cast<int64_t>(i) < count) out += to;
      if (i + 1 < offs.size()) out.append(s, offs[i], offs[i + 1] - offs[i]);
    }
    return value::string(std::move(out));
  }
  size_t pos = 0;
  for (int64_t n = 0; count < 0 || n < count; ++n) {
    size_t f = s.find(from, pos);
    if (f == std::string::npos) break;
    out.append(s, pos, f - pos);
    out += to;
    check_string_size(out.size());
    pos = f + from.size();
  }
  out.append(s, pos);
  return value::string(std::move(out));
}

bool affix_match(const value& self, const call_args& a, bool prefix) {
  const std::string& s = self.as_string();
  value arg = a.get(0, "prefix");
  value_list options = arg.is_list() ? arg.as_list() : value_list{arg};
  for (const auto& o : options) {
    if (!o.is_string()) fail(std::string(prefix ? "startswith" : "endswith") + " first arg must be str or a tuple of str");
    const std::string& x = o.as_string();
    if (x.size() <= s.size() && s.compare(prefix ? 0 : s.size() - x.size(), x.size(), x) == 0) return true;
  }
  return false;
}

bool all_of(const std::string& s, int (*pred)(int)) {
  if (s.empty()) return false;
  for (unsigned char c : s)
    if (c >= 0x80 || !pred(c)) return false;
  return true;
}

value m_join(const value& self, const call_args& a) {
  std::string out;
  value_list items = iterate(a.get(0, "iterable"));
  for (size_t i = 0; i < items.size(); ++i) {
    if (!items[i].is_string())
      fail("sequence item " + std::to_string(i) + ": expected str instance, " + items[i].type_name() + " found");
    if (i) out += self.as_string();
    out += items[i].as_string();
    check_string_size(out.size());
  }
  return value::string(std::move(out));
}

value m_splitlines(const value& self, const call_args&) {
  value_list out;
  const std::string& s = self.as_string();
  size_t start = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] != '\n' && s[i] != '\r') continue;
    out.push_back(value::string(s.substr(start, i - start)));
    if (s[i] == '\r' && i + 1 < s.size() && s[i + 1] == '\n') ++i;
    start = i + 1;
  }
  if (start < s.size()) out.push_back(value::string(s.substr(start)));
  return value::list(std::move(out));
}

value m_find(const value& self, const call_args& a) {
  const std::string& s = self.as_string();
  size_t f = s.find(str_arg(a, 0, "sub", "find"));
  if (f == std::string::npos) return value::integer(-1);
  return value::integer(static_cast<int64_t>(codepoint_count(s.substr(0, f))));
}

value m_count(const value& self, const call_args& a) {
  const std::string& s = self.as_string();
  const std::string& sub = str_arg(a, 0, "sub", "count");
  if (sub.empty()) return value::integer(static_cast<int64_t>(codepoint_count(s) + 1));
  int64_t n = 0;
  for (size_t f = s.find(sub); f != std::string::npos; f = s.find(sub, f + sub.size())) ++n;
  return value::integer(n);
}

}  // namespace

std::string str_strip(const std::string& s, bool left, bool right, const value& chars) {
  if (!chars.is_undefined() && !chars.is_none() && !chars.is_string())
    fail("strip arg must be None or str");
  auto offs = codepoint_offsets(s);
  size_t b = 0, e = offs.size() - 1;
  auto cp_at = [&](size_t i) {
    size_t p = offs[i];
    return next_codepoint(s, p);
  };
  while (left && b < e && in_chars(cp_at(b), chars)) ++b;
  while (right && e > b && in_chars(cp_at(e - 1), chars)) --e;
  return s.substr(offs[b], offs[e] - offs[b]);
}

std::optional<value> string_method(const value& s, const std::string& name) {
  static const std::vector<std::pair<std::string, method_impl>> table = {
      {"strip", [](const value& v, const call_args& a) { return value::string(str_strip(v.as_string(), true, true, a.get(0, "chars"))); }},
      {"lstrip", [](const value& v, const call_args& a) { return value::string(str_strip(v.as_string(), true, false, a.get(0, "chars"))); }},
      {"rstrip", [](const value& v, const call_args& a) { return value::string(str_strip(v.as_string(), false, true, a.get(0, "chars"))); }},
      {"upper", [](const value& v, const call_args&) { return value::string(change_case(v.as_string(), text_case::upper)); }},
      {"lower", [](const value& v, const call_args&) { return value::string(change_case(v.as_string(), text_case::lower)); }},
      {"title", [](const value& v, const call_args&) { return value::string(change_case(v.as_string(), text_case::title)); }},
      {"capitalize", [](const value& v, const call_args&) { return value::string(change_case(v.as_string(), text_case::capitalize)); }},
      {"startswith", [](const value& v, const call_args& a) { return value::boolean(affix_match(v, a, true)); }},
      {"endswith", [](const value& v, const call_args& a) { return value::boolean(affix_match(v, a, false)); }},
      {"split", m_split},
      {"replace", m_replace},
      {"join", m_join},
      {"splitlines", m_splitlines},
      {"find", m_find},
      {"count", m_count},
      {"isdigit", [](const value& v, const call_args&) { return value::boolean(all_of(v.as_string(), ::isdigit)); }},
      {"isalpha", [](const value& v, const call_args&) { return value::boolean(all_of(v.as_string(), ::isalpha)); }},
      {"isalnum", [](const value& v, const call_args&) { return value::boolean(all_of(v.as_string(), ::isalnum)); }},
      {"isspace", [](const value& v, const call_args&) { return value::boolean(all_of(v.as_string(), ::isspace)); }},
  };
  for (const auto& [n, impl] : table)
    if (n == name) return bind(s, name, impl);
  return std::nullopt;
}

std::optional<value> dict_method(const value& d, const std::string& name) {
  if (name == "items" || name == "keys" || name == "values") {
    int which = name == "items" ? 0 : (name == "keys" ? 1 : 2);
    return value::function(name, [d, which](const call_args&) {
      value_list out;
      for (const auto& [k, v] : d.as_dict().entries)
        out.push_back(which == 0 ? value::tuple({k, v}) : (which == 1 ? k : v));
      return value::list(std::move(out));
    });
  }
  if (name == "get") {
    return value::function(name, [d](const call_args& a) {
      const value* v = d.as_dict().find(a.get(0, "key"));
      if (v) return *v;
      return a.has(1, "default") ? a.get(1, "default") : value::none();
    });
  }
  if (name == "pop" || name == "popitem" || name == "setdefault" || name == "update" || name == "clear")
    return unsafe("dict", name);
  return std::nullopt;
}

std::optional<value> list_method(const value& l, const std::string& name) {
  if (name == "index" || name == "count") {
    bool index = name == "index";
    return value::function(name, [l, index](const call_args& a) {
      value x = a.get(0, "value");
      int64_t n = 0;
      for (size_t i = 0; i < l.as_list().size(); ++i) {
        if (!equals(l.as_list()[i], x)) continue;
        if (index) return value::integer(static_cast<int64_t>(i));
        ++n;
      }
      if (index) fail(to_repr(x) + " is not in list");
      return value::integer(n);
    });
  }
  static const char* mutators[] = {"append", "extend", "insert", "pop", "remove", "clear", "sort", "reverse"};
  for (const char* m : mutators)
    if (name == m) return unsafe("list", name);
  return std::nullopt;
}

}  // namespace tandem::chat_detail
