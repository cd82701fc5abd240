// The model cache: where files live, and remembering that a file has been verified so
// the ~100 MB sha256 runs once per file rather than once per start.
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "cache_stamp.hpp"
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"

namespace tandem {
namespace fs = std::filesystem;

fs::path cache_dir() {
  if (const char* c = std::getenv("TANDEM_CACHE"); c && *c) return fs::path(c);
  if (const char* x = std::getenv("XDG_CACHE_HOME"); x && *x) return fs::path(x) / "tandem";
  if (const char* h = std::getenv("HOME"); h && *h) return fs::path(h) / ".cache/tandem";
  throw error("cannot locate the model cache: set TANDEM_CACHE (XDG_CACHE_HOME and HOME are unset)");
}

fs::path cached_path(const model_manifest& m) {
  return cache_dir() / "models" / m.name / m.file_name;
}

namespace store {

fs::path stamp_path(const fs::path& file) {
  return file.parent_path() / (file.filename().string() + ".verified");
}

// "<size> <mtime ticks> <sha256>": a replaced or touched file no longer matches it.
static std::string stamp_text(const fs::path& file, const std::string& sha256) {
  std::error_code ec;
  const uint64_t size = fs::file_size(file, ec);
  if (ec) return {};
  const auto mtime = fs::last_write_time(file, ec).time_since_epoch().count();
  if (ec) return {};
  return std::to_string(size) + " " + std::to_string(mtime) + " " + sha256 + "\n";
}

bool stamp_matches(const fs::path& file, const std::string& sha256) {
  std::ifstream in(stamp_path(file), std::ios::binary);
  if (!in) return false;
  std::stringstream text;
  text << in.rdbuf();
  const std::string expected = stamp_text(file, sha256);
  return !expected.empty() && text.str() == expected;
}

void write_stamp(const fs::path& file, const std::string& sha256) {
  const std::string text = stamp_text(file, sha256);
  if (text.empty()) return;
  // Written beside and renamed, so a reader never sees half a stamp. A stamp that cannot
  // be written only costs a re-hash next time, so failures are not errors.
  const fs::path tmp = stamp_path(file).string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out) return;
  }
  std::error_code ec;
  fs::rename(tmp, stamp_path(file), ec);
  if (ec) fs::remove(tmp, ec);
}

}  // namespace store

std::optional<fs::path> verified_cached(const model_manifest& m, const progress_fn& progress) {
  const fs::path p = cached_path(m);
  std::error_code ec;
  if (!fs::is_regular_file(p, ec)) return std::nullopt;
  const uint64_t size = fs::file_size(p, ec);
  if (ec || size != m.file_size) {
    if (progress) {
      progress("cached " + p.string() + " has " + std::to_string(size) + " bytes, expected " +
               std::to_string(m.file_size));
    }
    return std::nullopt;
  }
  if (store::stamp_matches(p, m.file_sha256)) return p;
  const std::string actual = sha256_file(p, progress);
  if (actual != m.file_sha256) {
    if (progress) {
      progress("cached " + p.string() + " has sha256 " + actual + ", expected " + m.file_sha256);
    }
    return std::nullopt;
  }
  store::write_stamp(p, actual);
  return p;
}

}  // namespace tandem
