#pragma once
// Loading one plugin library file and checking its descriptor (internal to the host).
#include <filesystem>
#include <string>

#include <boost/dll/shared_library.hpp>

#include "tandem/plugin_abi.hpp"

namespace tandem::host_detail {

// A loaded, checked plugin. The library stays loaded for the life of the process.
struct library_load {
  boost::dll::shared_library lib;          // loaded even when the descriptor is bad
  const plugin_descriptor* desc = nullptr;  // null on failure
  std::string error;                        // why, when desc is null
};

// Loads `file` (RTLD_NOW | RTLD_LOCAL), reads the entry symbol and checks the descriptor
// against `expected_name` (the file's stem): API version, name, interface vs name prefix,
// a factory. Never throws.
library_load load_plugin_library(const std::filesystem::path& file,
                                 const std::string& expected_name);

}  // namespace tandem::host_detail
