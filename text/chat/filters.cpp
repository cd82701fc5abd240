// jinja2's built-in filters that chat templates use, with Hugging Face's tojson.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>

#include "builtins.hpp"
#include "utf8.hpp"

namespace tandem::chat_detail {
namespace {

using filter_fn = value (*)(const value& in, const call_args& a);

value call_method(const value& self, const std::string& name, const call_args& a) {
  return string_method(self, name)->as_callable().fn(a);
}

const value& need_string(const value& in, const char* filter) {
  if (!in.is_string()) fail(std::string("filter '") + filter + "' expects a string, got " + in.type_name());
  return in;
}

value as_str_value(const value& in) { return in.is_string() ? in : value::string(to_str(in)); }

// jinja2's make_attrgetter: "a.b.0" walks items, integer parts as indexes.
value attr_path(const value& item, const std::string& path) {
  value cur = item;
  size_t start = 0;
  while (true) {
    size_t dot = path.find('.', start);
    std::string part = path.substr(start, dot == std::string::npos ? std::string::npos : dot - start);
    bool digits = !part.empty() && std::all_of(part.begin(), part.end(), ::isdigit);
    require_defined(cur);
    cur = get_item(cur, digits ? value::integer(std::stoll(part)) : value::string(part));
    if (dot == std::string::npos) return cur;
    start = dot + 1;
  }
}

size_t length_of(const value& v) {
  switch (v.type()) {
    case kind::undefined: return 0;
    case kind::string: return codepoint_count(v.as_string());
    case kind::list: return v.as_list().size();
    case kind::dict: return v.as_dict().entries.size();
    default: fail("object of type '" + v.type_name() + "' has no len()");
  }
}

value f_default(const value& in, const call_args& a) {
  bool boolean = a.get(1, "boolean").truthy();
  if (in.is_undefined() || (boolean && !in.truthy())) return a.has(0, "default_value") ? a.get(0, "default_value") : value::string("");
  return in;
}

value f_length(const value& in, const call_args&) { return value::integer(static_cast<int64_t>(length_of(in))); }

value f_first(const value& in, const call_args&) {
  value_list items = iterate(in);
  return items.empty() ? value::undefined("No first item, sequence was empty.") : items.front();
}

value f_last(const value& in, const call_args&) {
  value_list items = iterate(in);
  return items.empty() ? value::undefined("No last item, sequence was empty.") : items.back();
}

value f_join(const value& in, const call_args& a) {
  value sep = a.get(0, "d");
  value attr = a.get(1, "attribute");
  std::string out;
  value_list items = iterate(in);
  for (size_t i = 0; i < items.size(); ++i) {
    if (i) out += sep.is_undefined() ? "" : to_str(sep);
    out += to_str(attr.is_undefined() || attr.is_none() ? items[i] : attr_path(items[i], to_str(attr)));
    check_string_size(out.size());
  }
  return value::string(std::move(out));
}

value f_reverse(const value& in, const call_args&) {
  if (in.is_string()) return slice(in, value::none(), value::none(), value::integer(-1));
  value_list items = iterate(in);
  std::reverse(items.begin(), items.end());
  return value::list(std::move(items));
}

value f_int(const value& in, const call_args& a) {
  value dflt = a.has(0, "default") ? a.get(0, "default") : value::integer(0);
  auto from_double = [&](double d) { return std::fabs(d) < 9.2e18 ? value::integer(static_cast<int64_t>(d)) : dflt; };
  if (in.type() == kind::floating) return from_double(in.as_double());
  if (in.is_number()) return value::integer(in.as_int());
  if (!in.is_string()) return dflt;
  std::string s = str_strip(in.as_string(), true, true, value());
  s.erase(std::remove(s.begin(), s.end(), '_'), s.end());
  try {
    size_t used = 0;
    int64_t i = std::stoll(s, &used, 10);
    if (used == s.size()) return value::integer(i);
    double d = std::stod(s, &used);
    if (used == s.size()) return from_double(d);
  } catch (const std::exception&) {
  }
  return dflt;
}

value f_float(const value& in, const call_args& a) {
  value dflt = a.has(0, "default") ? a.get(0, "default") : value::floating(0.0);
  if (in.is_number()) return value::floating(in.as_double());
  if (!in.is_string()) return dflt;
  std::string s = str_strip(in.as_string(), true, true, value());
  try {
    size_t used = 0;
    double d = std::stod(s, &used);
    if (used == s.size()) return value::floating(d);
  } catch (const std::exception&) {
  }
  return dflt;
}

value f_items(const value& in, const call_args&) {
  if (in.is_undefined()) return value::list({});
  if (!in.is_dict() || in.is_namespace()) fail("Can only get item pairs from a mapping.");
  value_list out;
  for (const auto& [k, v] : in.as_dict().entries) out.push_back(value::tuple({k, v}));
  return value::list(std::move(out));
}

value f_round(const value& in, const call_args& a) {
  value p = a.get(0, "precision");
  int64_t precision = p.is_number() ? p.as_int() : 0;
  std::string method = a.has(1, "method") ? to_str(a.get(1, "method")) : "common";
  if (!in.is_number()) fail("round() expects a number, got " + in.type_name());
  if (in.type() != kind::floating && method == "common" && precision >= 0) return value::integer(in.as_int());
  double x = in.as_double();
  if (method == "ceil" || method == "floor") {
    double scale = std::pow(10.0, static_cast<double>(precision));
    return value::floating((method == "ceil" ? std::ceil(x * scale) : std::floor(x * scale)) / scale);
  }
  if (method != "common") fail("method must be common, ceil or floor");
  if (precision < 0) {
    double scale = std::pow(10.0, static_cast<double>(-precision));
    return value::floating(std::nearbyint(x / scale) * scale);
  }
  char buf[400];
  std::snprintf(buf, sizeof buf, "%.*f", static_cast<int>(std::min<int64_t>(precision, 300)), x);
  return value::floating(std::strtod(buf, nullptr));
}

value f_escape(const value& in, const call_args&) {
  std::string out;
  for (char c : to_str(in)) {
    switch (c) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out += c;
    }
  }
  return value::string(std::move(out));
}

value f_indent(const value& in, const call_args& a) {
  value w = a.get(0, "width");
  if (w.is_number() && w.as_int() > 10000) fail("indent width too large");
  std::string ind = w.is_string() ? w.as_string() : std::string(w.is_number() ? static_cast<size_t>(std::max<int64_t>(0, w.as_int())) : 4, ' ');
  bool first = a.get(1, "first").truthy(), blank = a.get(2, "blank").truthy();
  value lines_v = call_method(value::string(to_str(in) + "\n"), "splitlines", {});
  const value_list& lines = lines_v.as_list();
  std::string out;
  for (size_t i = 0; i < lines.size(); ++i) {
    const std::string& line = lines[i].as_string();
    if (i) out += "\n";
    if (i && (blank || !line.empty())) out += ind;
    out += line;
    check_string_size(out.size());
  }
  return value::string(first ? ind + out : out);
}

value f_tojson(const value& in, const call_args& a) { return value::string(to_json(in, json_options_from(a, 0))); }

}  // namespace

value apply_filter(const std::string& name, const value& in, const call_args& a);

namespace {

// select / reject / selectattr / rejectattr share one loop.
value select_items(const value& in, const call_args& a, bool by_attr, bool keep) {
  size_t first_test = by_attr ? 1 : 0;
  std::string attr = by_attr ? to_str(a.get(0, "attribute")) : "";
  value test = a.get(first_test, "test_name");
  call_args targs;
  for (size_t i = first_test + 1; i < a.positional.size(); ++i) targs.positional.push_back(a.positional[i]);
  value_list out;
  for (const auto& item : iterate(in)) {
    value subject = by_attr ? attr_path(item, attr) : item;
    bool r = test.is_undefined() ? subject.truthy() : apply_test(to_str(test), subject, targs);
    if (r == keep) out.push_back(item);
  }
  return value::list(std::move(out));
}

value f_map(const value& in, const call_args& a) {
  value attr = a.get(99, "attribute");
  value_list out;
  if (!attr.is_undefined()) {
    value dflt = a.get(99, "default");
    for (const auto& item : iterate(in)) {
      value v = attr_path(item, to_str(attr));
      out.push_back(v.is_undefined() && !dflt.is_undefined() ? dflt : v);
    }
    return value::list(std::move(out));
  }
  if (a.positional.empty()) fail("map requires a filter name or attribute=");
  std::string filter = to_str(a.positional[0]);
  if (!is_filter(filter)) fail("no filter named '" + filter + "'");
  call_args fargs;
  fargs.positional.assign(a.positional.begin() + 1, a.positional.end());
  fargs.keyword = a.keyword;
  for (const auto& item : iterate(in)) out.push_back(apply_filter(filter, item, fargs));
  return value::list(std::move(out));
}

value sort_key(const value& v, bool case_sensitive) {
  if (!case_sensitive && v.is_string()) return call_method(v, "lower", {});
  return v;
}

value f_sort(const value& in, const call_args& a) {
  bool reverse = a.get(0, "reverse").truthy();
  bool cs = a.get(1, "case_sensitive").truthy();
  value attr = a.get(2, "attribute");
  value_list items = iterate(in);
  std::vector<std::pair<value, value>> keyed;
  for (auto& it : items)
    keyed.emplace_back(sort_key(attr.is_undefined() || attr.is_none() ? it : attr_path(it, to_str(attr)), cs), it);
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& x, const auto& y) {
    return reverse ? compare(y.first, x.first) < 0 : compare(x.first, y.first) < 0;
  });
  value_list out;
  for (auto& kv : keyed) out.push_back(kv.second);
  return value::list(std::move(out));
}

value f_unique(const value& in, const call_args& a) {
  bool cs = a.get(0, "case_sensitive").truthy();
  value_list out, seen;
  for (const auto& it : iterate(in)) {
    value k = sort_key(it, cs);
    if (std::none_of(seen.begin(), seen.end(), [&](const value& s) { return equals(s, k); })) {
      seen.push_back(k);
      out.push_back(it);
    }
  }
  return value::list(std::move(out));
}

value extreme(const value& in, const call_args& a, bool want_max) {
  value_list items = iterate(in);
  if (items.empty()) return value::undefined(std::string("No aggregated item, sequence was empty."));
  bool cs = a.get(0, "case_sensitive").truthy();
  value best = items[0];
  for (const auto& it : items) {
    int c = compare(sort_key(it, cs), sort_key(best, cs));
    if (want_max ? c > 0 : c < 0) best = it;
  }
  return best;
}

value f_sum(const value& in, const call_args& a) {
  value attr = a.get(0, "attribute");
  value total = a.has(1, "start") ? a.get(1, "start") : value::integer(0);
  for (const auto& it : iterate(in))
    total = binary_op("+", total, attr.is_undefined() || attr.is_none() ? it : attr_path(it, to_str(attr)));
  return total;
}

value f_dictsort(const value& in, const call_args& a) {
  bool cs = a.get(0, "case_sensitive").truthy();
  std::string by = a.has(1, "by") ? to_str(a.get(1, "by")) : "key";
  bool reverse = a.get(2, "reverse").truthy();
  value_list pairs = f_items(in, {}).as_list();
  size_t pos = by == "value" ? 1 : 0;
  std::stable_sort(pairs.begin(), pairs.end(), [&](const value& x, const value& y) {
    int c = compare(sort_key(x.as_list()[pos], cs), sort_key(y.as_list()[pos], cs));
    return reverse ? c > 0 : c < 0;
  });
  return value::list(std::move(pairs));
}

value f_format(const value& in, const call_args& a) {
  return binary_op("%", need_string(in, "format"), value::tuple(a.positional));
}

value f_wordcount(const value& in, const call_args&) {
  return value::integer(static_cast<int64_t>(call_method(as_str_value(in), "split", {}).as_list().size()));
}

const std::map<std::string, filter_fn>& registry() {
  static const std::map<std::string, filter_fn> filters = {
      {"abs", [](const value& in, const call_args&) { return in.is_number() && compare(in, value::integer(0)) < 0 ? negate(in, true) : negate(in, false); }},
      {"attr", [](const value& in, const call_args& a) { require_defined(in); return get_attr(in, to_str(a.get(0, "name"))); }},
      {"capitalize", [](const value& in, const call_args&) { return call_method(as_str_value(in), "capitalize", {}); }},
      {"count", f_length},
      {"d", f_default},
      {"default", f_default},
      {"dictsort", f_dictsort},
      {"e", f_escape},
      {"escape", f_escape},
      {"first", f_first},
      {"float", f_float},
      {"format", f_format},
      {"indent", f_indent},
      {"int", f_int},
      {"items", f_items},
      {"join", f_join},
      {"last", f_last},
      {"length", f_length},
      {"list", [](const value& in, const call_args&) { return value::list(iterate(in)); }},
      {"lower", [](const value& in, const call_args&) { return call_method(as_str_value(in), "lower", {}); }},
      {"map", f_map},
      {"max", [](const value& in, const call_args& a) { return extreme(in, a, true); }},
      {"min", [](const value& in, const call_args& a) { return extreme(in, a, false); }},
      {"reject", [](const value& in, const call_args& a) { return select_items(in, a, false, false); }},
      {"rejectattr", [](const value& in, const call_args& a) { return select_items(in, a, true, false); }},
      {"replace", [](const value& in, const call_args& a) { return call_method(as_str_value(in), "replace", a); }},
      {"reverse", f_reverse},
      {"round", f_round},
      {"safe", [](const value& in, const call_args&) { return in; }},
      {"select", [](const value& in, const call_args& a) { return select_items(in, a, false, true); }},
      {"selectattr", [](const value& in, const call_args& a) { return select_items(in, a, true, true); }},
      {"sort", f_sort},
      {"string", [](const value& in, const call_args&) { return as_str_value(in); }},
      {"sum", f_sum},
      {"title", [](const value& in, const call_args&) { return call_method(as_str_value(in), "title", {}); }},
      {"tojson", f_tojson},
      {"trim", [](const value& in, const call_args& a) { return value::string(str_strip(to_str(in), true, true, a.get(0, "chars"))); }},
      {"unique", f_unique},
      {"upper", [](const value& in, const call_args&) { return call_method(as_str_value(in), "upper", {}); }},
      {"wordcount", f_wordcount},
  };
  return filters;
}

}  // namespace

bool is_filter(const std::string& name) { return registry().count(name) != 0; }

value apply_filter(const std::string& name, const value& in, const call_args& a) {
  auto it = registry().find(name);
  if (it == registry().end()) fail("no filter named '" + name + "'");
  return it->second(in, a);
}

}  // namespace tandem::chat_detail
