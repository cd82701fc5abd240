#include "overrides.hpp"

#include "suggest.hpp"

namespace tandem::host_detail {
namespace {

std::string trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return std::string(s);
}

std::vector<std::string> section_names() {
  std::vector<std::string> names;
  for (const section_info& s : known_sections()) names.emplace_back(s.name);
  return names;
}

// Checks the section part of an override; reports "no such key" when it names none.
bool valid_target(const std::string& section, const std::string& key, const source_pos& here,
                  diag_sink& sink) {
  const std::string path = key.empty() ? section : section + "." + key;
  const section_info* info = find_section(section);
  if (!info) {
    auto near = closest(section, section_names());
    std::string hint = near ? "did you mean '" + (key.empty() ? *near : *near + "." + key) + "'?" : "";
    sink.error(here, path, "no such key", hint);
    return false;
  }
  if (info->kind == section_kind::scalar && !key.empty()) {
    sink.error(here, path, "no such key", "did you mean '" + section + "'?");
    return false;
  }
  if (info->kind != section_kind::scalar && key.empty()) {
    sink.error(here, path, "no such key", "name a setting: " + section + ".KEY=VALUE");
    return false;
  }
  return true;
}

}  // namespace

std::vector<override_setting> parse_overrides(std::span<const std::string> args, diag_sink& sink) {
  std::vector<override_setting> out;
  int index = 0;
  for (const std::string& a : args) {
    const source_pos here{command_line_file, 0, ++index};
    size_t eq = a.find('=');
    std::string lhs = eq == std::string::npos ? "" : trim(std::string_view(a).substr(0, eq));
    if (lhs.empty()) {
      sink.error(here, "", "'" + a + "' is not a key=value setting",
                 "e.g. --set scheduler.max_batch=8");
      continue;
    }
    size_t dot = lhs.find('.');
    override_setting o;
    o.section = lhs.substr(0, dot);
    o.key = dot == std::string::npos ? "" : lhs.substr(dot + 1);
    if (!valid_target(o.section, o.key, here, sink)) continue;
    o.value.k = raw_value::kind::plain;
    o.value.text = trim(std::string_view(a).substr(eq + 1));
    o.value.pos = here;
    out.push_back(std::move(o));
  }
  return out;
}

void apply_choice_overrides(std::span<const override_setting> ovs, raw_document& doc) {
  for (const override_setting& o : ovs) {
    const section_info* info = find_section(o.section);
    if (info->kind != section_kind::scalar && o.key != "plugin") continue;
    raw_section& sec = doc.get_or_add(o.section);
    if (sec.key_pos.file.empty()) sec.key_pos = o.value.pos;  // the section exists only here
    if (sec.malformed) continue;
    sec.set({o.key, o.value.pos, o.value});
  }
}

void apply_setting_overrides(std::span<const override_setting> ovs, config_schema schema,
                             const env_lookup& env, raw_section& sec, diag_sink& sink) {
  for (const config_key& k : schema) {
    if (!k.env) continue;
    std::optional<std::string> v = env ? env(k.env) : std::nullopt;
    if (!v) continue;
    raw_value rv;
    rv.text = *v;
    rv.pos = {environment_file, 0, 0};
    rv.origin = std::string("$").append(k.env);
    sec.set({k.key, rv.pos, rv});
  }
  std::vector<std::string> keys;
  for (const config_key& k : schema) keys.emplace_back(k.key);
  for (const override_setting& o : ovs) {
    if (o.section != sec.name || o.key == "plugin") continue;
    bool known = false;
    for (const config_key& k : schema) known = known || o.key == k.key;
    if (!known) {
      auto near = closest(o.key, keys);
      sink.error(o.value.pos, o.section + "." + o.key, "no such key",
                 near ? "did you mean '" + o.section + "." + *near + "'?" : "");
      continue;
    }
    sec.set({o.key, o.value.pos, o.value});
  }
}

}  // namespace tandem::host_detail
