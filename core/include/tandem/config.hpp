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
//   };
//   int64_t b = cfg.get_int("max_batch");
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
};

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
