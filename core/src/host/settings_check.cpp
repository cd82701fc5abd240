#include "settings_check.hpp"

#include <cmath>
#include <vector>

#include "suggest.hpp"

namespace tandem::host_detail {
namespace {

std::vector<std::string> split_choices(const char* choices) {
  std::vector<std::string> out;
  std::string_view rest(choices);
  while (true) {
    size_t bar = rest.find('|');
    out.emplace_back(rest.substr(0, bar));
    if (bar == std::string_view::npos) return out;
    rest.remove_prefix(bar + 1);
  }
}

std::string format_number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  return to_string(config_value{v});
}

}  // namespace

std::string shape(const raw_value& v) {
  switch (v.k) {
    case raw_value::kind::null:     return "nothing";
    case raw_value::kind::sequence: return "a list";
    case raw_value::kind::mapping:  return "a mapping";
    case raw_value::kind::quoted:   return "the quoted string '" + v.text + "'";
    default:                        return "'" + v.text + "'";
  }
}

namespace {

// Range and choices of an already typed value.
bool within_limits(const config_key& k, const config_value& cv, const raw_value& v,
                   const std::string& path, const std::string& origin, diag_sink& sink) {
  if ((k.type == config_type::integer || k.type == config_type::number) && k.min < k.max) {
    double x = k.type == config_type::integer ? static_cast<double>(std::get<int64_t>(cv))
                                              : std::get<double>(cv);
    if (x < k.min || x > k.max) {
      sink.error(v.pos, path, origin + v.text + " is out of range " + format_number(k.min) + ".." +
                                  format_number(k.max));
      return false;
    }
  }
  if (k.type == config_type::string && k.choices) {
    std::vector<std::string> choices = split_choices(k.choices);
    for (const std::string& c : choices)
      if (c == v.text) return true;
    std::string list;
    for (const std::string& c : choices) list += (list.empty() ? "" : ", ") + c;
    sink.error(v.pos, path, origin + "'" + v.text + "' is not one of " + list,
               did_you_mean(v.text, choices));
    return false;
  }
  return true;
}

}  // namespace

std::string describe_type(const config_key& k) {
  std::string s(name(k.type));
  if ((k.type == config_type::integer || k.type == config_type::number) && k.min < k.max)
    s += " in " + format_number(k.min) + ".." + format_number(k.max);
  if (k.type == config_type::string && k.choices) s += " (" + std::string(k.choices) + ")";
  return s;
}

std::optional<config_value> check_value(const config_key& k, const raw_value& v,
                                        const std::string& path, diag_sink& sink) {
  const std::string origin = v.origin.empty() ? "" : v.origin + ": ";
  if (v.k == raw_value::kind::null) {
    sink.error(v.pos, path, origin + "missing value (expected " + describe_type(k) + ")");
    return std::nullopt;
  }
  // A quoted "8" is a string in YAML; only strings accept quoted text.
  bool scalar = v.k == raw_value::kind::plain ||
                (v.k == raw_value::kind::quoted && k.type == config_type::string);
  std::optional<config_value> cv = scalar ? parse_config_value(k.type, v.text) : std::nullopt;
  if (!cv) {
    sink.error(v.pos, path, origin + "expected " + std::string(name(k.type)) + ", got " + shape(v));
    return std::nullopt;
  }
  if (!within_limits(k, *cv, v, path, origin, sink)) return std::nullopt;
  return cv;
}

void check_settings(const raw_section& sec, const std::string& owner, config_schema schema,
                    std::string_view skip, config& out, diag_sink& sink) {
  std::vector<std::string> valid;
  for (const config_key& k : schema) valid.emplace_back(k.key);
  for (const raw_entry& e : sec.entries) {
    if (e.key == skip) continue;
    const config_key* k = nullptr;
    for (const config_key& c : schema)
      if (e.key == c.key) k = &c;
    const std::string path = sec.name + "." + e.key;
    if (!k) {
      std::string msg = valid.empty() ? owner + " takes no settings" : "unknown setting for " + owner;
      sink.error(e.key_pos, path, msg, did_you_mean(e.key, valid));
      continue;
    }
    if (auto cv = check_value(*k, e.value, path, sink)) out.set(k->key, std::move(*cv));
  }
  for (const config_key& k : schema) {
    if (sec.find(k.key)) continue;
    if (!k.default_value) {
      sink.error(sec.key_pos, sec.name + "." + k.key,
                 "missing required setting (" + describe_type(k) + ") for " + owner);
      continue;
    }
    if (auto cv = parse_config_value(k.type, k.default_value)) out.set(k.key, std::move(*cv));
    else
      sink.error(sec.key_pos, sec.name + "." + k.key,
                 owner + " declares an invalid default '" + std::string(k.default_value) + "'");
  }
}

}  // namespace tandem::host_detail
