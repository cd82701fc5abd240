#pragma once
// Checks a section's raw values against a config_schema and produces the typed config a
// plugin receives (internal to the host).
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "diag_sink.hpp"
#include "raw_document.hpp"

namespace tandem::host_detail {

// The typed value of `v` for key `k`, or nullopt after reporting why not (wrong type,
// out of range, not one of the choices). key_path is "section.key".
std::optional<config_value> check_value(const config_key& k, const raw_value& v,
                                        const std::string& key_path, diag_sink& sink);

// Every entry of `sec` except those in `skip` (e.g. "plugin") must be a key of `schema`;
// every schema key ends up in `out`, from the section or its default. A key the section
// sets whose only_if fails on the final values is reported (it would have no effect).
// `owner` names the schema's owner in messages ("scheduler.fcfs", "engine").
void check_settings(const raw_section& sec, const std::string& owner, config_schema schema,
                    std::string_view skip, config& out, diag_sink& sink);

// One condition of a config_key::only_if: `key` (a sibling in the same schema) equal to
// `value`, or not equal to it.
struct only_if_condition {
  const config_key* key;
  bool equal;  // KEY=VALUE; false for KEY!=VALUE
  config_value value;
};

// The conditions of k.only_if (none when it is null) against `schema`, which holds `k`; or
// why the string is malformed ("'maybe' is not a bool for batch_invariant").
std::variant<std::vector<only_if_condition>, std::string> parse_only_if(const config_key& k,
                                                                        config_schema schema);

// The first malformed only_if of `schema` as "setting 'x': only_if '...': why"; "" when
// every one is well-formed. The host refuses a plugin whose schema has one.
std::string only_if_problem(config_schema schema);

// "a list", "'abc'", "nothing": what a value is, for "expected X, got Y".
std::string shape(const raw_value& v);

// "int in 1..65535", "string: fifo|lifo", "bool" — the type as users read it.
std::string describe_type(const config_key& k);

}  // namespace tandem::host_detail
