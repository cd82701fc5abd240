// libFuzzer harness: pipeline YAML through load_pipeline (yaml-cpp, duplicate keys and the
// alias budget, sections, every plugin schema the host finds, overrides, the topology).
// Input: an optional first line "#set section.key=value" (a command-line override), then the
// file. Every problem must come back as diagnostics, never as an exception (bar
// tandem::error for a file that cannot be read) or a crash; a result holds a spec or errors,
// never both or neither. Plugins: the folders in TANDEM_PLUGIN_PATH (scripts/fuzz.sh
// points it at the fuzz build's small plugins).
#include <unistd.h>

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "fuzz_support.hpp"
#include "tandem/error.hpp"
#include "tandem/pipeline.hpp"

using namespace tandem;
using tandem::fuzz::require;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static plugin_host host(plugin_host::default_search_path());
  static const std::filesystem::path file =
      std::filesystem::temp_directory_path() / ("tandem_fuzz_pipeline_" + std::to_string(getpid()) + ".yaml");
  std::string_view in(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> overrides;
  if (in.starts_with("#set ")) {
    const size_t eol = in.find('\n');
    overrides.emplace_back(in.substr(5, eol == std::string_view::npos ? std::string_view::npos : eol - 5));
    in.remove_prefix(eol == std::string_view::npos ? in.size() : eol + 1);
  }
  {
    std::ofstream out(file, std::ios::binary | std::ios::trunc);
    out.write(in.data(), static_cast<std::streamsize>(in.size()));
  }
  try {
    const pipeline_result r =
        load_pipeline(file, host, overrides, [](const std::string&) { return std::optional<std::string>{}; });
    require(r.spec.has_value() != !r.errors.empty(), "a result with both a spec and errors, or neither");
    for (const diagnostic& d : r.errors) require(!d.message.empty(), "a diagnostic without a message");
  } catch (const config_error&) {
    // load_pipeline reports through diagnostics; a thrown config_error is still a clear error.
  }
  return 0;
}
