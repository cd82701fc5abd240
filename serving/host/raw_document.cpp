#include "raw_document.hpp"

namespace tandem::host_detail {

raw_entry* raw_section::find(std::string_view key) {
  for (raw_entry& e : entries)
    if (e.key == key) return &e;
  return nullptr;
}

const raw_entry* raw_section::find(std::string_view key) const {
  for (const raw_entry& e : entries)
    if (e.key == key) return &e;
  return nullptr;
}

void raw_section::set(raw_entry e) {
  if (raw_entry* old = find(e.key)) {
    old->value = std::move(e.value);
    return;
  }
  entries.push_back(std::move(e));
}

std::span<const section_info> known_sections() {
  static const section_info table[] = {
      {"model", section_kind::scalar, true, {}},
      {"weights", section_kind::plugin, true, plugin_interface::weight_format},
      {"backend", section_kind::plugin, true, plugin_interface::backend},
      {"scheduler", section_kind::plugin, true, plugin_interface::scheduler},
      {"transport", section_kind::plugin, true, plugin_interface::transport},
      {"drafter", section_kind::plugin, false, plugin_interface::drafter},
      {"engine", section_kind::core, false, {}},
      {"topology", section_kind::core, false, {}},
      {"server", section_kind::core, false, {}},
      {"chat", section_kind::core, false, {}},
  };
  return table;
}

const section_info* find_section(std::string_view name) {
  for (const section_info& s : known_sections())
    if (s.name == name) return &s;
  return nullptr;
}

raw_section* raw_document::find(std::string_view name) {
  for (raw_section& s : sections)
    if (s.name == name) return &s;
  return nullptr;
}

raw_section& raw_document::get_or_add(std::string_view name) {
  if (raw_section* s = find(name)) return *s;
  sections.push_back(raw_section{std::string(name), {}, {}});
  return sections.back();
}

}  // namespace tandem::host_detail
