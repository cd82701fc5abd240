#pragma once
// Reads a pipeline file with yaml-cpp into a raw_document, reporting syntax errors,
// duplicate keys (which yaml-cpp accepts silently), unknown sections and sections of the
// wrong shape (internal to the host).
#include <filesystem>
#include <optional>

#include "diag_sink.hpp"
#include "raw_document.hpp"

namespace tandem::host_detail {

// nullopt when nothing more can be checked (unreadable, bad syntax, not a mapping).
std::optional<raw_document> read_pipeline_yaml(const std::filesystem::path& file, diag_sink& sink);

}  // namespace tandem::host_detail
