#pragma once
// Checks a section's raw values against a config_schema and produces the typed config a
// plugin receives (internal to the host).
#include <optional>
#include <string>

#include "diag_sink.hpp"
#include "raw_document.hpp"

namespace tandem::host_detail {

// The typed value of `v` for key `k`, or nullopt after reporting why not (wrong type,
// out of range, not one of the choices). key_path is "section.key".
std::optional<config_value> check_value(const config_key& k, const raw_value& v,
                                        const std::string& key_path, diag_sink& sink);

// Every entry of `sec` except those in `skip` (e.g. "plugin") must be a key of `schema`;
// every schema key ends up in `out`, from the section or its default. `owner` names the
// schema's owner in messages ("scheduler.fcfs", "engine").
void check_settings(const raw_section& sec, const std::string& owner, config_schema schema,
                    std::string_view skip, config& out, diag_sink& sink);

// "a list", "'abc'", "nothing": what a value is, for "expected X, got Y".
std::string shape(const raw_value& v);

// "int in 1..65535", "string: fifo|lifo", "bool" — the type as users read it.
std::string describe_type(const config_key& k);

}  // namespace tandem::host_detail
