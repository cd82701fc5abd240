#pragma once
// The `<file>.verified` stamp: the size, mtime and sha256 a cached file had when it was
// last hashed. A matching stamp lets a cache hit skip hashing ~100 MB again.
#include <filesystem>
#include <string>

namespace tandem::store {

std::filesystem::path stamp_path(const std::filesystem::path& file);

// True when the stamp exists and records this file's current size and mtime with `sha256`.
bool stamp_matches(const std::filesystem::path& file, const std::string& sha256);

// Records the file's current size and mtime with `sha256`; best effort (never throws).
void write_stamp(const std::filesystem::path& file, const std::string& sha256);

}  // namespace tandem::store
