#pragma once
// A pipeline file before validation: sections of untyped values with their positions.
// The YAML reader fills it; command-line and environment overrides are merged into it;
// the schema checks turn it into typed configs (internal to the host).
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/pipeline.hpp"

namespace tandem::host_detail {

struct raw_value {
  enum class kind { plain, quoted, null, sequence, mapping };
  kind k = kind::plain;
  std::string text;    // scalar text (plain or quoted)
  source_pos pos;      // of the value (its key's when the value is null)
  std::string origin;  // "" for the file; "$NAME" for an environment variable
};

struct raw_entry {
  std::string key;
  source_pos key_pos;
  raw_value value;
};

struct raw_section {
  std::string name;
  source_pos key_pos;            // of the section's key (where "missing ..." errors point)
  std::vector<raw_entry> entries;  // file order; the first of duplicate keys
  bool malformed = false;          // not a mapping; already reported, check nothing more

  raw_entry* find(std::string_view key);
  const raw_entry* find(std::string_view key) const;
  // Replaces or appends (overrides).
  void set(raw_entry e);
};

enum class section_kind { scalar, plugin, core };

struct section_info {
  std::string_view name;
  section_kind kind;
  bool required;
  plugin_interface iface;  // for plugin sections
};

// Every top-level key a pipeline file may have, in the order they are documented.
std::span<const section_info> known_sections();
const section_info* find_section(std::string_view name);

struct raw_document {
  std::vector<raw_section> sections;  // known sections present, file order
  // The scalar `model:` is kept as a section with one entry keyed "".
  raw_section* find(std::string_view name);
  raw_section& get_or_add(std::string_view name);
};

}  // namespace tandem::host_detail
