#pragma once
// The --plugin-path option that validate and plugins share: directories searched before
// the default search path ($TANDEM_PLUGIN_PATH, the install dir, the build tree).
#include <boost/program_options.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "tandem/plugin_host.hpp"

namespace tandem::cli {

inline void add_plugin_path_option(boost::program_options::options_description& d) {
  d.add_options()("plugin-path", boost::program_options::value<std::vector<std::string>>()->composing(),
                  "search this directory for plugins first, repeatable");
}

inline std::vector<std::filesystem::path> plugin_search_path(const boost::program_options::variables_map& vm) {
  std::vector<std::filesystem::path> search;
  if (vm.count("plugin-path"))
    for (const auto& p : vm["plugin-path"].as<std::vector<std::string>>()) search.emplace_back(p);
  for (auto& p : plugin_host::default_search_path()) search.push_back(std::move(p));
  return search;
}

}  // namespace tandem::cli
