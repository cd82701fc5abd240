#pragma once
// plugin_host: finds plugin libraries, checks their descriptors and creates instances.
//
//   tandem::plugin_host host(tandem::plugin_host::default_search_path());
//   std::string b = host.resolve_auto(tandem::plugin_interface::backend);  // "backend.cpu"
//   auto be = host.create<tandem::backend>(b, cfg);   // cfg validated against the schema
//
// A plugin `scheduler.fcfs` is the file `scheduler.fcfs.so`, found in a search directory
// or one level below it (the build tree keeps plugins in plugins/<folder>/). Libraries are
// loaded with RTLD_NOW | RTLD_LOCAL on the calling thread and never unloaded: every loaded
// library is also kept in a process-wide list, so objects created from a plugin may outlive
// the host that created them. Use one host from one thread at a time.
#include <filesystem>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/config.hpp"
#include "tandem/error.hpp"
#include "tandem/logger.hpp"
#include "tandem/plugin_abi.hpp"

namespace tandem {

class plugin_host {
 public:
  // `search_path` is tried in order; `log` is handed to plugins (default_logger() if null).
  explicit plugin_host(std::vector<std::filesystem::path> search_path, logger* log = nullptr);
  ~plugin_host();
  plugin_host(const plugin_host&) = delete;
  plugin_host& operator=(const plugin_host&) = delete;

  // Each dir of $TANDEM_PLUGIN_PATH (':'-separated), then <exe dir>/../lib[/<multiarch>]/
  // tandem/plugins (install layout), then <build root>/plugins when the running executable
  // lives in a meson build tree.
  static std::vector<std::filesystem::path> default_search_path();
  const std::vector<std::filesystem::path>& search_path() const { return search_path_; }

  // Loads `<name>.so` from the first directory that has it and checks its descriptor (entry
  // symbol, api_version, name, interface matching the name's prefix). Throws plugin_error
  // naming the plugin, every directory tried and "did you mean" when absent or broken.
  const plugin_descriptor& find(std::string_view name);

  // The non-throwing form of find: what the pipeline validator reports from.
  struct lookup_result {
    const plugin_descriptor* desc = nullptr;  // null when absent or broken
    bool file_found = false;                  // a <name>.so exists (so it is broken)
    std::filesystem::path file;
    std::string error;                        // why desc is null
  };
  lookup_result lookup(std::string_view name);

  // Names of every `*.so` in the search path (files only, nothing loaded), sorted.
  std::vector<std::string> available_names() const;

  // Every plugin in the search path (first occurrence of each name wins), loaded to read its
  // descriptor; broken files are reported in `errors` ("file: reason"), never thrown.
  struct discovery {
    std::vector<const plugin_descriptor*> plugins;  // sorted by name
    std::vector<std::string> errors;
  };
  discovery discover();

  // The library file a found plugin was loaded from (empty if not loaded).
  std::filesystem::path file_of(std::string_view name) const;

  // The plugin's probe (cached: probes may initialise devices). Exceptions count as score 0.
  probe_result probe(std::string_view name);

  // The runnable plugin of `iface` whose name starts with "<iface>." with the highest probe
  // score (ties: first by name). plugin_error listing every candidate's reason if none runs.
  std::string resolve_auto(plugin_interface iface);

  // A new instance of plugin `name`; cfg must already be validated against its schema.
  // plugin_error when the plugin is missing, its factory throws or returns null, or the
  // object does not implement I.
  template <class I>
  std::unique_ptr<I> create(std::string_view name, const config& cfg) {
    std::unique_ptr<plugin_object> obj = create_object(name, cfg);
    if (I* typed = dynamic_cast<I*>(obj.get())) {
      obj.release();
      return std::unique_ptr<I>(typed);
    }
    throw plugin_error(std::string(name), "the created object does not implement the interface "
                                          "the caller asked for (descriptor says '" +
                                              std::string(tandem::name(find(name).interface)) + "')");
  }

  std::unique_ptr<plugin_object> create_object(std::string_view name, const config& cfg);

  // "<iface>" of a dotted name's prefix ("scheduler.fcfs" -> scheduler); false if none.
  static bool interface_of_name(std::string_view name, plugin_interface& out);

 private:
  struct loaded;
  std::filesystem::path locate(std::string_view name) const;

  std::vector<std::filesystem::path> search_path_;
  logger* log_;
  std::map<std::string, std::unique_ptr<loaded>, std::less<>> loaded_;
  std::map<std::string, std::string, std::less<>> failed_;  // name -> reason
  std::map<std::string, probe_result, std::less<>> probes_;
};

}  // namespace tandem
