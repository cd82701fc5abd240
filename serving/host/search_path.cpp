// Where plugins are looked for: the environment, the install layout, the build tree.
#include <cstdlib>
#include <set>
#include <system_error>

#include <boost/dll/runtime_symbol_info.hpp>

#include "tandem/plugin_host.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;

bool is_dir(const fs::path& p) {
  std::error_code ec;
  return fs::is_directory(p, ec);
}

void add_env_dirs(std::vector<fs::path>& out) {
  const char* env = std::getenv("TANDEM_PLUGIN_PATH");
  if (!env) return;
  std::string_view rest(env);
  while (!rest.empty()) {
    size_t colon = rest.find(':');
    std::string_view dir = rest.substr(0, colon);
    if (!dir.empty()) out.emplace_back(dir);
    rest = colon == std::string_view::npos ? std::string_view() : rest.substr(colon + 1);
  }
}

// <prefix>/lib/tandem/plugins or <prefix>/lib/<multiarch>/tandem/plugins (meson's libdir).
void add_install_dirs(const fs::path& exe_dir, std::vector<fs::path>& out) {
  fs::path lib = exe_dir.parent_path() / "lib";
  if (is_dir(lib / "tandem" / "plugins")) out.push_back(lib / "tandem" / "plugins");
  if (!is_dir(lib)) return;
  std::error_code ec;
  std::set<fs::path> sorted;  // directory order is arbitrary; keep the result stable
  for (const auto& e : fs::directory_iterator(lib, ec))
    if (is_dir(e.path() / "tandem" / "plugins")) sorted.insert(e.path() / "tandem" / "plugins");
  out.insert(out.end(), sorted.begin(), sorted.end());
}

// A meson build tree keeps plugins in <build root>/plugins/<folder>/; executables live one
// or two levels below the root (cli/tandem, tests/host/test_x).
void add_build_tree_dir(const fs::path& exe_dir, std::vector<fs::path>& out) {
  fs::path dir = exe_dir;
  for (int up = 0; up < 3 && !dir.empty(); ++up, dir = dir.parent_path()) {
    if (is_dir(dir / "meson-private") && is_dir(dir / "plugins")) {
      out.push_back(dir / "plugins");
      return;
    }
    if (dir == dir.parent_path()) return;
  }
}

}  // namespace

std::vector<fs::path> plugin_host::default_search_path() {
  std::vector<fs::path> dirs;
  add_env_dirs(dirs);
  boost::dll::fs::error_code ec;
  fs::path exe = boost::dll::program_location(ec);
  if (!ec && !exe.empty()) {
    add_install_dirs(exe.parent_path(), dirs);
    add_build_tree_dir(exe.parent_path(), dirs);
  }
  // The same directory named twice (env and build tree) is searched once.
  std::vector<fs::path> unique;
  std::set<fs::path> seen;
  for (const fs::path& d : dirs) {
    std::error_code cec;
    fs::path key = fs::weakly_canonical(d, cec);
    if (seen.insert(cec ? d : key).second) unique.push_back(d);
  }
  return unique;
}

}  // namespace tandem
