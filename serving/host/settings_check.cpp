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

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

std::string join(const std::vector<std::string>& parts, std::string_view sep) {
  std::string out;
  for (const std::string& p : parts) out += (out.empty() ? "" : std::string(sep)) + p;
  return out;
}

const config_key* find_key(config_schema schema, std::string_view key) {
  for (const config_key& c : schema)
    if (key == c.key) return &c;
  return nullptr;
}

// Why `text` is not a value key `k` can take ("mma_max_rows takes int in 0..64, not '99'");
// "" when it is one.
std::string not_a_value_of(const config_key& k, std::string_view text) {
  const std::string no = std::string(k.key) + " takes " + describe_type(k) + ", not '" + std::string(text) + "'";
  std::optional<config_value> cv = parse_config_value(k.type, text);
  if (!cv) return no;
  if ((k.type == config_type::integer || k.type == config_type::number) && k.min < k.max) {
    const double x = k.type == config_type::integer ? static_cast<double>(std::get<int64_t>(*cv))
                                                    : std::get<double>(*cv);
    if (x < k.min || x > k.max) return no;
  }
  if (k.type == config_type::string && k.choices) {
    for (const std::string& c : split_choices(k.choices))
      if (c == text) return {};
    return no;
  }
  return {};
}

// "batch_invariant: true", and where it came from when not from the file.
std::string sibling_value(const raw_section& sec, const config_key& k, const config_value& v) {
  const std::string text = std::string(k.key) + ": " + to_string(v);
  const raw_entry* e = sec.find(k.key);
  if (!e) return "the default " + text;
  if (!e->value.origin.empty()) return text + " from " + e->value.origin;
  if (e->value.pos.file == command_line_file) return text + " from the command line";
  return text;
}

// Where a value was set: the file (0), the environment (1), the command line (2).
int layer_of(const raw_value& v) {
  if (!v.origin.empty() || v.pos.file == environment_file) return 1;
  return v.pos.file == command_line_file ? 2 : 0;
}

// Reports every key the section sets whose only_if does not hold on the final values in
// `out` (a setting that would do nothing): an error, unless a sibling that voids it was set
// by a later layer than the key (a file's retention_s under --set engine.retention=lru: the
// override is deliberate, the file's line a leftover), which is a warning.
void check_only_if(const raw_section& sec, const std::string& owner, config_schema schema,
                   std::string_view skip, const config& out, diag_sink& sink) {
  for (const raw_entry& e : sec.entries) {
    if (e.key == skip) continue;
    const config_key* k = find_key(schema, e.key);
    if (!k || !k->only_if || !out.has(k->key)) continue;  // unknown or bad: reported already
    const std::string path = sec.name + "." + e.key;
    auto parsed = parse_only_if(*k, schema);
    if (const std::string* why = std::get_if<std::string>(&parsed)) {
      sink.error(e.key_pos, path,
                 owner + " declares a malformed only_if '" + std::string(k->only_if) + "': " + *why);
      continue;
    }
    std::vector<std::string> voiding, fixes;
    int latest = -1;  // the latest layer that set a voiding sibling (-1: defaults only)
    bool known = true;
    for (const only_if_condition& c : std::get<std::vector<only_if_condition>>(parsed)) {
      auto it = out.values().find(c.key->key);
      if (it == out.values().end()) {
        known = false;  // the sibling's own value was reported
        break;
      }
      if ((it->second == c.value) == c.equal) continue;
      voiding.push_back(sibling_value(sec, *c.key, it->second));
      fixes.push_back(std::string(c.key->key) + (c.equal ? ": " : " to other than ") + to_string(c.value));
      if (const raw_entry* se = sec.find(c.key->key)) latest = std::max(latest, layer_of(se->value));
    }
    if (!known || voiding.empty()) continue;
    const std::string origin = e.value.origin.empty() ? "" : e.value.origin + ": ";
    const std::string what = origin + "has no effect in " + owner + " with " + join(voiding, " and ");
    if (latest > layer_of(e.value)) sink.warning(e.key_pos, path, what + ", set after it: ignored");
    else sink.error(e.key_pos, path, what, "remove it, or set " + join(fixes, " and "));
  }
}

}  // namespace

std::variant<std::vector<only_if_condition>, std::string> parse_only_if(const config_key& k,
                                                                        config_schema schema) {
  std::vector<only_if_condition> out;
  if (!k.only_if) return out;
  std::string_view rest(k.only_if);
  while (true) {
    const size_t comma = rest.find(',');
    const std::string_view cond = trim(rest.substr(0, comma));
    const std::string shown(cond);
    if (cond.empty()) return std::string("an empty condition (write KEY=VALUE or KEY!=VALUE, separated by commas)");
    const size_t eq = cond.find('=');
    if (eq == std::string_view::npos || eq == 0) return "'" + shown + "' is not KEY=VALUE or KEY!=VALUE";
    const bool equal = cond[eq - 1] != '!';
    const std::string_view key = trim(cond.substr(0, equal ? eq : eq - 1));
    const std::string_view text = trim(cond.substr(eq + 1));
    if (key.empty() || text.empty() || text.find_first_of("=!") != std::string_view::npos)
      return "'" + shown + "' is not KEY=VALUE or KEY!=VALUE";
    const config_key* sibling = find_key(schema, key);
    if (!sibling) {
      std::vector<std::string> keys;
      for (const config_key& c : schema) keys.emplace_back(c.key);
      const std::string hint = did_you_mean(key, keys);
      return "no setting '" + std::string(key) + "' in the schema" + (hint.empty() ? "" : " (" + hint + ")");
    }
    if (sibling == &k) return "'" + std::string(key) + "' is the setting itself";
    if (std::string why = not_a_value_of(*sibling, text); !why.empty()) return why;
    out.push_back({sibling, equal, *parse_config_value(sibling->type, text)});
    if (comma == std::string_view::npos) return out;
    rest.remove_prefix(comma + 1);
  }
}

std::string only_if_problem(config_schema schema) {
  for (const config_key& k : schema) {
    auto parsed = parse_only_if(k, schema);
    if (const std::string* why = std::get_if<std::string>(&parsed))
      return "setting '" + std::string(k.key ? k.key : "") + "': only_if '" + k.only_if + "': " + *why;
  }
  return {};
}

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
    const config_key* k = find_key(schema, e.key);
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
  check_only_if(sec, owner, schema, skip, out, sink);
}

}  // namespace tandem::host_detail
