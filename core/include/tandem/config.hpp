#pragma once
// Plugin settings: the schema a plugin declares, and the validated values it receives.
//
// A plugin declares its keys in a config_schema; the pipeline loader checks a YAML
// section against it (types, ranges, choices, unknown keys), applies command-line and
// environment overrides, fills defaults, and hands the plugin a `config` in which every
// declared key is present with the declared type.
//
//   static const tandem::config_key keys[] = {
//     {"max_batch", tandem::config_type::integer, "8", "most sequences per step", 1, 4096},
//     {"preempt", tandem::config_type::boolean, "false", "may evict running sequences"},
//     {"victims", tandem::config_type::integer, "1", "sequences one preemption evicts", 1, 8,
//      nullptr, nullptr, "preempt=true"},  // only_if: setting it with preempt false is an error
//   };
//   int64_t b = cfg.get_int("max_batch");
//
// A key that does nothing unless its siblings allow it says so in only_if (below), so that a
// user who sets it anyway hears why instead of being silently ignored.
#include <cstdint>
#include <map>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <variant>

#include "tandem/export.hpp"

namespace tandem {

enum class config_type : uint8_t { boolean, integer, number, string };

constexpr std::string_view name(config_type t) {
  switch (t) {
    case config_type::boolean: return "bool";
    case config_type::integer: return "int";
    case config_type::number:  return "float";
    case config_type::string:  return "string";
  }
  return "?";
}

// One declared setting. Plain aggregate so plugins can declare tables of them statically.
struct config_key {
  const char* key;          // name inside the plugin's section, e.g. "max_wait_ms"
  config_type type;
  const char* default_value;  // textual default, parsed as `type`; nullptr = required
  const char* description;
  double min = 0;           // inclusive range for integer/number when min < max
  double max = 0;
  const char* choices = nullptr;  // for strings: "a|b|c"; nullptr = any string
  const char* env = nullptr;      // environment variable that overrides it, e.g. "MAX_WAIT_MS"
  const char* only_if = nullptr;  // when the key does anything at all; see below
};

// only_if: the sibling settings (keys of the same schema) without which this key has no
// effect, e.g. "batch_invariant=false,q8_activations=true". Conditions are separated by
// commas and must all hold; each is KEY=VALUE or KEY!=VALUE, VALUE written as in a pipeline
// file for KEY's type (true/false, a number in KEY's range, one of KEY's choices; no quotes,
// no ',', '=' or '!'; spaces around the parts are ignored). The loader checks them only for
// a key the user set (pipeline file, its environment variable or --set), against the
// siblings' final values (set or default), and rejects the setting, naming the siblings
// that void it; a key left at its default is never an error. When a voiding sibling was set
// by a later layer than the key (file < environment < command line), the override wins:
// the key is ignored with a warning instead. The host checks the string
// itself when it loads the plugin (an unknown KEY, the key itself, a VALUE that KEY cannot
// take): a bad one makes the plugin unusable. A description need not repeat what only_if
// says: `tandem plugins --schema` prints it.

using config_schema = std::span<const config_key>;

using config_value = std::variant<bool, int64_t, double, std::string>;

// Validated settings of one plugin instance. Missing keys or wrong types are
// programming errors (the loader guarantees the schema), reported as tandem::error.
class TANDEM_API config {
 public:
  void set(std::string key, config_value value) { values_[std::move(key)] = std::move(value); }
  bool has(std::string_view key) const { return values_.find(key) != values_.end(); }

  bool get_bool(std::string_view key) const;
  int64_t get_int(std::string_view key) const;
  double get_number(std::string_view key) const;  // integers convert
  const std::string& get_string(std::string_view key) const;

  const std::map<std::string, config_value, std::less<>>& values() const { return values_; }

 private:
  std::map<std::string, config_value, std::less<>> values_;
};

// Parses `text` as a value of `type`; nullopt when it is not one.
TANDEM_API std::optional<config_value> parse_config_value(config_type type, std::string_view text);
TANDEM_API std::string to_string(const config_value& v);

}  // namespace tandem
