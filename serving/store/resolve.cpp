// Turning a pipeline's `model:` value into a file: a path (a file, or a model directory
// holding config.json), or a manifest name.
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"

namespace tandem {
namespace fs = std::filesystem;
namespace {

// Names never contain '/', and model files carry a weight-format extension.
bool looks_like_path(std::string_view s) {
  const fs::path p(s);
  return s.find('/') != s.npos || p.extension() == ".gguf" || p.extension() == ".safetensors";
}

std::string known_list() {
  std::string list;
  for (const auto& n : known_models()) list += (list.empty() ? "" : ", ") + n;
  if (!list.empty()) return list;
  std::string dirs;
  for (const auto& d : manifest_dirs()) dirs += (dirs.empty() ? "" : ", ") + d.string();
  return "none (no manifests found in: " + (dirs.empty() ? std::string("-") : dirs) +
         "; set TANDEM_MODELS_DIR)";
}

}  // namespace

fs::path resolve_model(std::string_view model, bool allow_pull, const progress_fn& progress,
                       const pull_options& opt) {
  if (model.empty()) throw model_error("", "no model given; known models: " + known_list());
  const fs::path p(model);
  std::error_code ec;
  if (fs::is_regular_file(p, ec)) return p;
  // A model directory (EXL3 / Hugging Face layout: config.json inside) is itself; the
  // pipeline's weights plugin (weights.exl3 or weights.safetensors) opens it.
  if (fs::is_directory(p, ec) && fs::is_regular_file(p / "config.json", ec)) return p;
  if (fs::is_directory(p, ec))
    throw model_error(p.string(), "is not a regular file, nor a model directory (no config.json in it)");
  if (fs::exists(p, ec)) throw model_error(p.string(), "is not a regular file");
  std::optional<model_manifest> m = find_manifest(model);
  if (!m) {
    if (looks_like_path(model)) throw model_error(p.string(), "no such model file");
    throw model_error(std::string(model),
                      "neither a model file nor a known model name; known models: " + known_list());
  }
  if (allow_pull) return pull(*m, progress, opt);
  if (auto cached = verified_cached(*m, progress)) return *cached;
  throw model_error(m->name, "not in the model cache (expected " + cached_path(*m).string() +
                                 "); run `tandem pull " + m->name + "` to fetch it");
}

}  // namespace tandem
