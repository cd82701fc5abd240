#pragma once
// MANIFEST.sha256 of a drafter directory (`sha256sum` output: "<64 hex>  <file>" per line).
// Every listed file must exist and hash to its line; the files the drafter reads must be
// listed (a weight file the manifest does not vouch for is refused, not trusted).
//
//   const dflash2_manifest m = dflash2_manifest::verify(dir);   // hashes every listed file
//   m.require_listed("config.json");
#include <filesystem>
#include <map>
#include <string>

namespace tandem {

class dflash2_manifest {
 public:
  static constexpr const char* file_name = "MANIFEST.sha256";

  // Reads dir/MANIFEST.sha256 and checks every listed file's sha256; model_error naming the
  // manifest (a malformed line) or the file (missing, unreadable, hash mismatch).
  static dflash2_manifest verify(const std::filesystem::path& dir);
  // The lines of a manifest's text, unchecked against any file; `source` names it in errors.
  static std::map<std::string, std::string> parse(const std::string& text, const std::string& source);

  // model_error naming the manifest when `file` (a name inside the directory) is not listed.
  void require_listed(const std::string& file) const;
  const std::map<std::string, std::string>& hashes() const { return hashes_; }

 private:
  std::filesystem::path manifest_;
  std::map<std::string, std::string> hashes_;  // file name -> lowercase hex sha256
};

}  // namespace tandem
