#include "plugin_library.hpp"

#include <dlfcn.h>

#include <mutex>
#include <vector>

#include "settings_check.hpp"
#include "tandem/plugin_host.hpp"

namespace tandem::host_detail {
namespace {

// Every library ever loaded, never destroyed: objects created by a plugin (and their
// vtables) must stay valid after the host that loaded it is gone, and unloading a library
// that registered thread-locals or atexit handlers is unsafe anyway.
void keep_forever(const boost::dll::shared_library& lib) {
  static std::mutex* mu = new std::mutex;
  static auto* libs = new std::vector<boost::dll::shared_library>;
  std::lock_guard lock(*mu);
  libs->push_back(lib);
}

std::string check_descriptor(const plugin_descriptor* d, const std::string& expected) {
  if (!d) return "the entry symbol returned a null descriptor";
  // Only api_version is read before it is checked: the rest of the layout may differ.
  if (d->api_version != plugin_api_version)
    return "built for plugin API version " + std::to_string(d->api_version) +
           ", this host speaks version " + std::to_string(plugin_api_version) + "; rebuild it";
  if (!d->name) return "the descriptor has no name";
  if (expected != d->name)
    return "the descriptor is named '" + std::string(d->name) + "' but the file is '" +
           expected + ".so'; a plugin file must be named after its registry name";
  plugin_interface by_name{};
  if (!plugin_host::interface_of_name(expected, by_name))
    return "the name has no interface prefix (weights., backend., scheduler., drafter., "
           "transport.)";
  if (by_name != d->interface)
    return "the descriptor implements '" + std::string(name(d->interface)) +
           "' but the name says '" + std::string(name(by_name)) + "'";
  if (!d->create) return "the descriptor has no factory";
  if (d->schema_size > 0 && !d->schema) return "the descriptor's schema pointer is null";
  // A malformed config_key::only_if is the plugin's bug: refuse it here, where `tandem
  // plugins` and every pipeline naming it show why, not when a user happens to set the key.
  if (std::string why = only_if_problem(d->keys()); !why.empty()) return "its schema is malformed: " + why;
  return {};
}

}  // namespace

library_load load_plugin_library(const std::filesystem::path& file,
                                 const std::string& expected_name) {
  library_load out;
  boost::dll::fs::error_code ec;
  ::dlerror();
  // rtld_now: an unresolved symbol fails here, with a message, not mid-request.
  // rtld_local: plugins reach the core through libtandem_core.so, which each links, so none
  // needs another's symbols, and two plugins may define the same internal names.
  out.lib.load(file, boost::dll::load_mode::rtld_now | boost::dll::load_mode::rtld_local, ec);
  if (ec || !out.lib.is_loaded()) {
    // Boost.DLL keeps dlerror()'s text (bad ELF, undefined symbol...) available to us.
    const char* why = ::dlerror();
    out.error = "cannot load: " + std::string(why ? why : ec.message());
    return out;
  }
  keep_forever(out.lib);
  if (!out.lib.has(TANDEM_PLUGIN_ENTRY_SYMBOL)) {
    out.error = "no entry symbol '" TANDEM_PLUGIN_ENTRY_SYMBOL "'; is TANDEM_PLUGIN(...) missing?";
    return out;
  }
  auto entry = out.lib.get<const plugin_descriptor*()>(TANDEM_PLUGIN_ENTRY_SYMBOL);
  const plugin_descriptor* d = entry();
  out.error = check_descriptor(d, expected_name);
  if (out.error.empty()) out.desc = d;
  return out;
}

}  // namespace tandem::host_detail
