#pragma once
// Settings from outside the file: `--set section.key=value` and the environment variables
// that schema keys declare. Precedence: file < environment < command line (internal).
#include <span>
#include <string>
#include <vector>

#include "diag_sink.hpp"
#include "raw_document.hpp"

namespace tandem::host_detail {

struct override_setting {
  std::string section;  // "scheduler"; "model" for the scalar section
  std::string key;      // "max_batch"; "" for model
  raw_value value;
};

// Parses every "section.key=value"; reports those that are not key=value or name no section.
std::vector<override_setting> parse_overrides(std::span<const std::string> args, diag_sink& sink);

// The overrides needed before plugins are known: `model=` and `<section>.plugin=`.
void apply_choice_overrides(std::span<const override_setting> ovs, raw_document& doc);

// The environment variables declared by `schema`, then the command-line settings of `sec`;
// reports command-line keys the schema lacks. Call once the section's schema is known.
void apply_setting_overrides(std::span<const override_setting> ovs, config_schema schema,
                             const env_lookup& env, raw_section& sec, diag_sink& sink);

}  // namespace tandem::host_detail
