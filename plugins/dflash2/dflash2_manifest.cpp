#include "dflash2_manifest.hpp"

#include <cctype>
#include <sstream>

#include "hf_json.hpp"
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"

namespace tandem {

std::map<std::string, std::string> dflash2_manifest::parse(const std::string& text, const std::string& source) {
  std::map<std::string, std::string> out;
  std::istringstream in(text);
  std::string line;
  for (int n = 1; std::getline(in, line); ++n) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.empty()) continue;
    const auto bad = [&](const std::string& why) {
      throw model_error(source, "line " + std::to_string(n) + " " + why + " (sha256sum format: '<64 hex>  <file>')");
    };
    // sha256sum escapes names holding '\\' or a newline with a leading backslash; drafter
    // files never have such names, so such a line is refused rather than decoded.
    if (line.size() < 67 || line[0] == '\\') bad("is not '<sha256>  <file>'");
    std::string hash = line.substr(0, 64);
    for (char& c : hash) {
      if (!std::isxdigit(static_cast<unsigned char>(c))) bad("does not start with 64 hex digits");
      c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
    }
    if (line[64] != ' ' || (line[65] != ' ' && line[65] != '*')) bad("does not separate hash and file by '  '");
    const std::string file = line.substr(66);
    // Only plain names: a manifest must not reach outside its directory.
    if (file.empty() || file == "." || file == ".." || file.find('/') != std::string::npos ||
        file.find('\0') != std::string::npos)
      bad("names '" + file + "', not a file of the directory");
    if (!out.emplace(file, hash).second) bad("lists '" + file + "' a second time");
  }
  if (out.empty()) throw model_error(source, "lists no files");
  return out;
}

dflash2_manifest dflash2_manifest::verify(const std::filesystem::path& dir) {
  dflash2_manifest m;
  m.manifest_ = dir / file_name;
  std::error_code ec;
  if (!std::filesystem::is_regular_file(m.manifest_, ec))
    throw model_error(m.manifest_.string(), "is missing: a dflash2 drafter directory carries the sha256 of each file");
  m.hashes_ = parse(hf::read_text(m.manifest_), m.manifest_.string());
  for (const auto& [file, want] : m.hashes_) {
    const std::filesystem::path p = dir / file;
    if (!std::filesystem::is_regular_file(p, ec))
      throw model_error(p.string(), "is listed in " + std::string(file_name) + " but missing");
    const std::string got = sha256_file(p);
    if (got != want)
      throw model_error(p.string(), "sha256 mismatch: " + std::string(file_name) + " says " + want + ", the file has " +
                                        got + " (corrupt or changed after training)");
  }
  return m;
}

void dflash2_manifest::require_listed(const std::string& file) const {
  if (!hashes_.contains(file))
    throw model_error(manifest_.string(), "does not list '" + file + "', which the drafter reads");
}

}  // namespace tandem
