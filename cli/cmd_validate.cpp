// `tandem validate FILE [--set section.key=value]...`: checks a pipeline without running it
// (no GPU needed). Every problem goes to stderr in compiler format (file:line:col: error:
// ...); exit 1 if there is any, else "FILE: ok (plugins...)" on stdout and exit 0.
#include <boost/program_options.hpp>

#include <filesystem>
#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "plugin_search.hpp"
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"
#include "tandem/pipeline.hpp"

namespace tandem::cli {
namespace po = boost::program_options;
namespace {

po::options_description validate_options() {
  po::options_description d(
      "tandem validate FILE [options]\n\n"
      "Checks a pipeline file against the core's and every plugin's schema and prints\n"
      "every error at once. Values: file < environment variables < --set.\nOptions");
  d.add_options()
      ("help,h", "show this help")
      ("set,s", po::value<std::vector<std::string>>()->composing(),
       "override a setting, repeatable: --set scheduler.max_batch=4");
  add_plugin_path_option(d);
  return d;
}

// The model named by the pipeline must be an existing file, a model directory (config.json
// inside: EXL3 for weights.exl3) or a known manifest; nothing is downloaded or hashed here.
std::optional<diagnostic> check_model(const pipeline_spec& spec) {
  const std::string& m = spec.model;
  diagnostic d{spec.model_pos, "model", "", ""};
  std::error_code ec;
  if (std::filesystem::is_regular_file(m, ec)) return std::nullopt;
  if (std::filesystem::is_regular_file(std::filesystem::path(m) / "config.json", ec)) return std::nullopt;
  if (m.find('/') != std::string::npos || m.ends_with(".gguf")) {
    d.message = "model file '" + m + "' not found";
    return d;
  }
  try {
    if (find_manifest(m)) return std::nullopt;
  } catch (const error& e) {
    d.message = std::string("model manifest '") + m + "' is invalid: " + e.what();
    return d;
  }
  std::string known;
  for (const std::string& n : known_models()) known += (known.empty() ? "" : ", ") + n;
  d.message = "unknown model '" + m + "' (neither a file nor a model manifest)";
  d.hint = known.empty() ? "no manifests found; set TANDEM_MODELS_DIR" : "known models: " + known;
  return d;
}

std::string summary(const pipeline_spec& s) {
  std::string out = s.backend.name + ", " + s.scheduler.name + ", " + s.weights.name + ", " +
                    s.transport.name;
  if (s.drafter) out += ", " + s.drafter->name;
  return out;
}

}  // namespace

int run_validate(const args& a) {
  const po::options_description desc = validate_options();
  po::options_description all;
  all.add(desc).add_options()("file", po::value<std::vector<std::string>>());
  po::positional_options_description pos;
  pos.add("file", -1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(a).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tandem validate: " << e.what() << "\n\n" << desc << '\n';
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << '\n';
    return 0;
  }
  if (!vm.count("file") || vm["file"].as<std::vector<std::string>>().size() != 1) {
    std::cerr << "tandem validate: expected exactly one pipeline FILE\n\n" << desc << '\n';
    return 2;
  }
  const std::string file = vm["file"].as<std::vector<std::string>>().front();
  std::vector<std::filesystem::path> search = plugin_search_path(vm);
  std::vector<std::string> sets;
  if (vm.count("set")) sets = vm["set"].as<std::vector<std::string>>();

  plugin_host host(std::move(search));
  pipeline_result r = load_pipeline(file, host, sets);
  if (r.spec)
    if (auto d = check_model(*r.spec)) r.errors.push_back(*d);
  for (const diagnostic& d : r.warnings) std::cerr << d.str() << '\n';
  for (const diagnostic& d : r.errors) std::cerr << d.str() << '\n';
  if (!r.errors.empty()) {
    std::cerr << r.errors.size() << (r.errors.size() == 1 ? " error" : " errors") << '\n';
    return 1;
  }
  std::cout << file << ": ok (" << summary(*r.spec) << ")\n";
  return 0;
}

}  // namespace tandem::cli
