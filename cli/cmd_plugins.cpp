// `tandem plugins [--schema]`: every plugin in the search path with its interface,
// description, probe result and file; with --schema each one's settings and the core
// sections' settings. Libraries that fail to load are listed at the end (exit 1).
#include <boost/program_options.hpp>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <iostream>
#include <string>
#include <string_view>
#include <vector>

#include "commands.hpp"
#include "plugin_search.hpp"
#include "tandem/pipeline.hpp"
#include "tandem/plugin_host.hpp"

namespace tandem::cli {
namespace po = boost::program_options;
namespace {

po::options_description plugins_options() {
  po::options_description d(
      "tandem plugins [options]\n\n"
      "Lists the plugins in the search path ($TANDEM_PLUGIN_PATH, the install's\n"
      "lib/tandem/plugins, the build tree's plugins/) and whether each can run here.\n"
      "To read their descriptors it loads every plugin library it finds there and in\n"
      "their subfolders, which runs the library's initialisers: list only directories\n"
      "you trust. (Serving loads only the plugins a pipeline names, and for\n"
      "'backend: auto' the backend.* libraries.)\nOptions");
  d.add_options()
      ("help,h", "show this help")
      ("schema", "also print every setting: type, default, range or choices, env variable, "
                 "and the other settings it needs to have any effect (only if)");
  add_plugin_path_option(d);
  return d;
}

std::string number(double v) {
  if (v == std::floor(v) && std::fabs(v) < 1e15) return std::to_string(static_cast<int64_t>(v));
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// config_key::only_if as "a=x, b!=y" (its spaces are free; the host checked its form).
std::string conditions(std::string_view only_if) {
  std::string out;
  while (true) {
    const size_t comma = only_if.find(',');
    const std::string_view cond = trim(only_if.substr(0, comma));
    const size_t eq = cond.find('=');
    const size_t op = eq != std::string_view::npos && eq > 0 && cond[eq - 1] == '!' ? eq - 1 : eq;
    out += out.empty() ? "" : ", ";
    if (eq == std::string_view::npos) out += cond;
    else out += std::string(trim(cond.substr(0, op))) + std::string(cond.substr(op, eq + 1 - op)) +
                std::string(trim(cond.substr(eq + 1)));
    if (comma == std::string_view::npos) return out;
    only_if.remove_prefix(comma + 1);
  }
}

// "  max_batch  int 1..4096 = 16  [env MAX_BATCH]  [only if K=V]" and the description on
// the next line.
void print_schema(config_schema keys) {
  if (keys.empty()) std::cout << "    (no settings)\n";
  for (const config_key& k : keys) {
    std::cout << "    " << k.key << ": " << name(k.type);
    if ((k.type == config_type::integer || k.type == config_type::number) && k.min < k.max)
      std::cout << " in " << number(k.min) << ".." << number(k.max);
    if (k.choices) std::cout << " (" << k.choices << ")";
    if (k.default_value)
      std::cout << " = " << (k.type == config_type::string ? "'" : "") << k.default_value
                << (k.type == config_type::string ? "'" : "");
    else
      std::cout << " (required)";
    if (k.env) std::cout << "  [env " << k.env << "]";
    if (k.only_if) std::cout << "  [only if " << conditions(k.only_if) << "]";
    std::cout << "\n        " << (k.description ? k.description : "") << '\n';
  }
}

void print_plugin(plugin_host& host, const plugin_descriptor& d, bool schema) {
  probe_result p = host.probe(d.name);
  std::cout << d.name << "  [" << name(d.interface) << "]  "
            << (p.score > 0 ? "runnable (score " + std::to_string(p.score) + ")"
                            : "cannot run here")
            << (p.reason.empty() ? "" : ": " + p.reason) << '\n'
            << "    " << (d.description ? d.description : "") << '\n'
            << "    file: " << host.file_of(d.name).string() << '\n';
  if (schema) print_schema(d.keys());
}

}  // namespace

int run_plugins(const args& a) {
  const po::options_description desc = plugins_options();
  po::variables_map vm;
  try {
    po::store(po::command_line_parser(a).options(desc).run(), vm);
    po::notify(vm);
  } catch (const po::error& e) {
    std::cerr << "tandem plugins: " << e.what() << "\n\n" << desc << '\n';
    return 2;
  }
  if (vm.count("help")) {
    std::cout << desc << '\n';
    return 0;
  }
  std::vector<std::filesystem::path> search = plugin_search_path(vm);
  plugin_host host(std::move(search));
  const bool schema = vm.count("schema") > 0;

  std::cout << "search path:\n";
  for (const auto& dir : host.search_path()) std::cout << "  " << dir.string() << '\n';
  plugin_host::discovery found = host.discover();
  std::cout << '\n' << found.plugins.size() << " plugins:\n";
  for (const plugin_descriptor* d : found.plugins) print_plugin(host, *d, schema);
  if (schema) {
    std::cout << "\ncore sections:\n";
    const std::pair<const char*, config_schema> core[] = {
        {"engine", engine_schema()}, {"server", server_schema()}, {"chat", chat_schema()},
        {"topology", topology_schema()}};
    for (const auto& [section, keys] : core) {
      std::cout << section << "\n";
      print_schema(keys);
    }
  }
  if (found.errors.empty()) return 0;
  std::cout << "\nplugins that failed to load:\n";
  for (const std::string& e : found.errors) std::cout << "  " << e << '\n';
  return 1;
}

}  // namespace tandem::cli
