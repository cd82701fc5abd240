#include "tandem/plugin_host.hpp"

#include <algorithm>
#include <set>
#include <system_error>

#include "plugin_library.hpp"
#include "suggest.hpp"

namespace tandem {
namespace {

namespace fs = std::filesystem;
constexpr std::string_view so_suffix = ".so";

bool is_file(const fs::path& p) {
  std::error_code ec;
  return fs::is_regular_file(p, ec);
}

// A directory and its immediate subdirectories (sorted): the build tree keeps each
// plugin in plugins/<folder>/.
std::vector<fs::path> dir_and_children(const fs::path& dir) {
  std::vector<fs::path> out{dir};
  std::error_code ec;
  std::set<fs::path> children;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    std::error_code dec;
    if (e.is_directory(dec)) children.insert(e.path());
  }
  out.insert(out.end(), children.begin(), children.end());
  return out;
}

std::string join_dirs(const std::vector<fs::path>& dirs) {
  if (dirs.empty()) return "(no directories; set TANDEM_PLUGIN_PATH)";
  std::string s;
  for (const auto& d : dirs) s += (s.empty() ? "" : ", ") + d.string();
  return s;
}

}  // namespace

struct plugin_host::loaded {
  boost::dll::shared_library lib;
  const plugin_descriptor* desc = nullptr;
  fs::path file;
};

plugin_host::plugin_host(std::vector<fs::path> search_path, logger* log)
    : search_path_(std::move(search_path)), log_(log ? log : &default_logger()) {}

plugin_host::~plugin_host() = default;

bool plugin_host::interface_of_name(std::string_view name, plugin_interface& out) {
  size_t dot = name.find('.');
  if (dot == std::string_view::npos || dot + 1 == name.size()) return false;
  std::string_view prefix = name.substr(0, dot);
  for (auto i : {plugin_interface::weight_format, plugin_interface::backend,
                 plugin_interface::scheduler, plugin_interface::drafter,
                 plugin_interface::transport}) {
    if (tandem::name(i) == prefix) {
      out = i;
      return true;
    }
  }
  return false;
}

fs::path plugin_host::locate(std::string_view name) const {
  const std::string file = std::string(name) + std::string(so_suffix);
  for (const fs::path& dir : search_path_)
    for (const fs::path& d : dir_and_children(dir))
      if (is_file(d / file)) return d / file;
  return {};
}

std::vector<std::string> plugin_host::available_names() const {
  std::set<std::string> names;
  for (const fs::path& dir : search_path_) {
    for (const fs::path& d : dir_and_children(dir)) {
      std::error_code ec;
      for (const auto& e : fs::directory_iterator(d, ec)) {
        std::string f = e.path().filename().string();
        if (f.size() <= so_suffix.size() || !f.ends_with(so_suffix) || !is_file(e.path())) continue;
        std::string stem = f.substr(0, f.size() - so_suffix.size());
        plugin_interface iface{};
        if (interface_of_name(stem, iface)) names.insert(stem);  // skips lib*.so helpers
      }
    }
  }
  return {names.begin(), names.end()};
}

plugin_host::lookup_result plugin_host::lookup(std::string_view name) {
  lookup_result r;
  if (auto it = loaded_.find(name); it != loaded_.end()) {
    r.desc = it->second->desc;
    r.file_found = true;
    r.file = it->second->file;
    return r;
  }
  // A registry name is a file stem, never a path: "../x" must not reach outside the
  // search directories.
  if (name.empty() || name.find('/') != std::string_view::npos || name.front() == '.') {
    r.error = "not a plugin name";
    return r;
  }
  r.file = locate(name);
  r.file_found = !r.file.empty();
  if (!r.file_found) {
    r.error = "not found";
    return r;
  }
  if (auto it = failed_.find(name); it != failed_.end()) {
    r.error = it->second;
    return r;
  }
  host_detail::library_load l = host_detail::load_plugin_library(r.file, std::string(name));
  if (!l.desc) {
    failed_.emplace(std::string(name), l.error);
    r.error = l.error;
    return r;
  }
  log_->debug("loaded plugin " + std::string(name) + " from " + r.file.string());
  auto entry = std::make_unique<loaded>(loaded{std::move(l.lib), l.desc, r.file});
  r.desc = entry->desc;
  loaded_.emplace(std::string(name), std::move(entry));
  return r;
}

const plugin_descriptor& plugin_host::find(std::string_view name) {
  lookup_result r = lookup(name);
  if (r.desc) return *r.desc;
  if (r.file_found) throw plugin_error(std::string(name), r.file.string() + ": " + r.error);
  std::vector<std::string> names = available_names();
  std::string hint = host_detail::did_you_mean(name, names);
  throw plugin_error(std::string(name), "plugin '" + std::string(name) + "' not found; searched " +
                                            join_dirs(search_path_) +
                                            (hint.empty() ? "" : " (" + hint + ")"));
}

fs::path plugin_host::file_of(std::string_view name) const {
  auto it = loaded_.find(name);
  return it == loaded_.end() ? fs::path() : it->second->file;
}

plugin_host::discovery plugin_host::discover() {
  discovery d;
  for (const std::string& n : available_names()) {
    lookup_result r = lookup(n);
    if (r.desc)
      d.plugins.push_back(r.desc);
    else
      d.errors.push_back(r.file.string() + ": " + r.error);
  }
  return d;
}

probe_result plugin_host::probe(std::string_view name) {
  if (auto it = probes_.find(name); it != probes_.end()) return it->second;
  const plugin_descriptor& d = find(name);
  probe_result p;
  if (d.probe) {
    try {
      p = d.probe();
    } catch (const std::exception& e) {
      p = {0, std::string("probe threw: ") + e.what()};
    } catch (...) {
      p = {0, "probe threw an unknown exception"};
    }
  }
  probes_.emplace(std::string(name), p);
  return p;
}

std::string plugin_host::resolve_auto(plugin_interface iface) {
  const std::string prefix = std::string(tandem::name(iface)) + ".";
  std::string best, reasons;
  int best_score = 0;
  // Only the candidates are loaded (their constructors run): a library of another interface
  // in the search path stays unopened unless a pipeline names it.
  std::vector<const plugin_descriptor*> candidates;
  for (const std::string& n : available_names()) {  // sorted by name: ties go first
    if (!n.starts_with(prefix)) continue;
    lookup_result r = lookup(n);
    if (r.desc) candidates.push_back(r.desc);
    else reasons += "; " + n + ": " + r.error;
  }
  for (const plugin_descriptor* d : candidates) {
    if (d->interface != iface) continue;
    probe_result p = probe(d->name);
    if (p.score > best_score) {
      best_score = p.score;
      best = d->name;
    } else if (p.score <= 0) {
      reasons += std::string("; ") + d->name + ": " + (p.reason.empty() ? "cannot run here" : p.reason);
    }
  }
  if (best.empty())
    throw plugin_error(prefix + "auto", "no runnable " + std::string(tandem::name(iface)) +
                                            " plugin in " + join_dirs(search_path_) + reasons);
  return best;
}

std::unique_ptr<plugin_object> plugin_host::create_object(std::string_view name, const config& cfg) {
  const plugin_descriptor& d = find(name);
  plugin_context ctx{log_, &cfg};
  plugin_object* obj = nullptr;
  try {
    obj = d.create(ctx);
  } catch (const plugin_error& e) {
    if (e.plugin() == name) throw;
    throw plugin_error(std::string(name), std::string("create failed: ") + e.what());
  } catch (const std::exception& e) {
    throw plugin_error(std::string(name), std::string("create failed: ") + e.what());
  } catch (...) {
    throw plugin_error(std::string(name), "create failed with an unknown exception");
  }
  if (!obj) throw plugin_error(std::string(name), "the factory returned no object");
  return std::unique_ptr<plugin_object>(obj);
}

}  // namespace tandem
