// Python's json.dumps, as Hugging Face's tojson filter calls it (ensure_ascii=False by
// default, no HTML escaping).
#include <algorithm>
#include <cmath>
#include <cstdio>

#include "builtins.hpp"
#include "utf8.hpp"

namespace tandem::chat_detail {
namespace {

void escape_string(std::string& out, const std::string& s, bool ensure_ascii) {
  out += '"';
  for (size_t i = 0; i < s.size();) {
    unsigned char c = static_cast<unsigned char>(s[i]);
    char buf[16];
    if (c == '"') out += "\\\"";
    else if (c == '\\') out += "\\\\";
    else if (c == '\n') out += "\\n";
    else if (c == '\r') out += "\\r";
    else if (c == '\t') out += "\\t";
    else if (c == '\b') out += "\\b";
    else if (c == '\f') out += "\\f";
    else if (c < 0x20) {
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
    } else if (c >= 0x80 && ensure_ascii) {
      uint32_t cp = next_codepoint(s, i);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        std::snprintf(buf, sizeof buf, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
      } else {
        std::snprintf(buf, sizeof buf, "\\u%04x", cp);
      }
      out += buf;
      continue;
    } else {
      out += static_cast<char>(c);
    }
    ++i;
  }
  out += '"';
}

std::string json_float(double d) {
  if (std::isnan(d)) return "NaN";
  if (std::isinf(d)) return d < 0 ? "-Infinity" : "Infinity";
  return float_repr(d);
}

std::string key_string(const value& k) {
  switch (k.type()) {
    case kind::string: return k.as_string();
    case kind::boolean: return k.as_bool() ? "true" : "false";
    case kind::none: return "null";
    case kind::integer: return std::to_string(k.as_int());
    case kind::floating: return json_float(k.as_double());
    default: fail("keys must be str, int, float, bool or None, not " + k.type_name());
  }
}

class writer {
 public:
  explicit writer(const json_options& o) : o_(o) {}

  void write(std::string& out, const value& v, int level) {
    if (level > 200) fail("tojson: value nested too deeply");
    switch (v.type()) {
      case kind::none: out += "null"; return;
      case kind::boolean: out += v.as_bool() ? "true" : "false"; return;
      case kind::integer: out += std::to_string(v.as_int()); return;
      case kind::floating: out += json_float(v.as_double()); return;
      case kind::string: escape_string(out, v.as_string(), o_.ensure_ascii); return;
      case kind::list: return write_list(out, v.as_list(), level);
      case kind::dict:
        if (!v.is_namespace()) return write_dict(out, v.as_dict(), level);
        [[fallthrough]];
      default: fail("Object of type " + v.type_name() + " is not JSON serializable");
    }
  }

 private:
  const json_options& o_;

  void newline(std::string& out, int level) const {
    if (!o_.indent) return;
    out += '\n';
    for (int i = 0; i < level; ++i) out += *o_.indent;
  }

  void write_list(std::string& out, const value_list& l, int level) {
    if (l.empty()) {
      out += "[]";
      return;
    }
    out += '[';
    for (size_t i = 0; i < l.size(); ++i) {
      check_string_size(out.size());
      if (i) out += o_.item_sep;
      newline(out, level + 1);
      write(out, l[i], level + 1);
    }
    newline(out, level);
    out += ']';
  }

  void write_dict(std::string& out, const dict_data& d, int level) {
    if (d.entries.empty()) {
      out += "{}";
      return;
    }
    std::vector<std::pair<std::string, const value*>> items;
    for (const auto& [k, v] : d.entries) items.emplace_back(key_string(k), &v);
    if (o_.sort_keys)
      std::stable_sort(items.begin(), items.end(), [](const auto& a, const auto& b) { return a.first < b.first; });
    out += '{';
    for (size_t i = 0; i < items.size(); ++i) {
      check_string_size(out.size());
      if (i) out += o_.item_sep;
      newline(out, level + 1);
      escape_string(out, items[i].first, o_.ensure_ascii);
      out += o_.key_sep;
      write(out, *items[i].second, level + 1);
    }
    newline(out, level);
    out += '}';
  }
};

}  // namespace

std::string to_json(const value& v, const json_options& opt) {
  std::string out;
  writer(opt).write(out, v, 0);
  return out;
}

json_options json_options_from(const call_args& a, size_t first) {
  json_options o;
  o.ensure_ascii = a.get(first, "ensure_ascii").truthy();
  value indent = a.get(first + 1, "indent");
  if (indent.is_string()) o.indent = indent.as_string();
  else if (indent.type() == kind::integer) o.indent = std::string(static_cast<size_t>(std::clamp<int64_t>(indent.as_int(), 0, 64)), ' ');
  else if (!indent.is_undefined() && !indent.is_none()) fail("tojson: indent must be an integer or a string");
  if (o.indent) o.item_sep.assign(1, ',');
  value seps = a.get(first + 2, "separators");
  if (seps.is_list()) {
    if (seps.as_list().size() != 2 || !seps.as_list()[0].is_string() || !seps.as_list()[1].is_string())
      fail("tojson: separators must be a pair of strings");
    o.item_sep = seps.as_list()[0].as_string();
    o.key_sep = seps.as_list()[1].as_string();
  }
  o.sort_keys = a.get(first + 3, "sort_keys").truthy();
  return o;
}

}  // namespace tandem::chat_detail
