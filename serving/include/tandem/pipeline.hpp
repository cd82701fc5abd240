#pragma once
// Pipeline files: the YAML that names the model, the plugins and their settings.
//
//   tandem::plugin_host host(tandem::plugin_host::default_search_path());
//   tandem::pipeline_result r = tandem::load_pipeline("pipelines/default.yaml", host,
//                                                     {{"scheduler.max_batch=4"}});
//   if (!r.spec) for (auto& d : r.errors) std::cerr << d.str() << '\n';
//
// Loading is parse -> validate against the core's and each plugin's schema -> resolve
// `auto`; every problem is collected in one pass and reported in compiler format with its
// key path and, where it helps, "did you mean". Nothing is instantiated here.
//
// Precedence of a setting's value: the file < the environment variable its schema key
// declares (config_key::env, e.g. MAX_WAIT_MS) < the command line (`--set section.key=v`).
#include <filesystem>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "tandem/config.hpp"
#include "tandem/plugin_host.hpp"

namespace tandem {

// Where a value came from; 1-based. line 0 = no position in a file: "<environment>", or
// "<command line>" with col = the 1-based index of the override it came from.
struct source_pos {
  std::string file;
  int line = 0, col = 0;
};

struct diagnostic {
  source_pos pos;
  std::string key_path;  // "scheduler.max_batch"; empty when the problem has no key
  std::string message;
  std::string hint;      // "did you mean 'x'?"; empty when none
  bool warning = false;  // a setting that is ignored, the pipeline still loads
  // "file:line:col: error: key.path: message (hint)" ("warning:" for a warning)
  std::string str() const;
};

// A chosen plugin; `name` is the full registry name (`auto` and short names resolved) and
// `cfg` holds every key of its schema.
struct plugin_choice {
  std::string name;
  config cfg;
  source_pos pos;  // where the plugin was named
};

struct topology {
  int ranks = 1, tensor_parallel = 1, pipeline_parallel = 1, expert_parallel = 1;
  double heartbeat_s = 5;  // rank 0 tells idle workers it is alive this often
};

struct pipeline_spec {
  std::filesystem::path file;
  std::string model;  // a model manifest name (configs/models/<name>.yaml) or a path
  source_pos model_pos;  // where the model was named (for errors found later)
  plugin_choice weights, backend, scheduler, transport;
  std::optional<plugin_choice> drafter;
  config engine, server;  // validated against engine_schema() / server_schema()
  config chat;            // chat_schema(): how chat prompts are tokenized
  topology topo;
  // Settings the pipeline loads with but that do nothing (a later override voided them):
  // the runtime logs them at start, `tandem validate` prints them.
  std::vector<diagnostic> warnings;
};

// spec is set only when errors is empty.
struct pipeline_result {
  std::optional<pipeline_spec> spec;
  std::vector<diagnostic> errors;
  std::vector<diagnostic> warnings;  // also in spec->warnings
};

using env_lookup = std::function<std::optional<std::string>(const std::string&)>;

// The process environment (std::getenv).
std::optional<std::string> getenv_lookup(const std::string& name);

// Loads and validates `file`. overrides: "section.key=value" (e.g. "scheduler.max_batch=8",
// "backend.plugin=cpu", "model=path.gguf"); env: how environment variables are read.
pipeline_result load_pipeline(const std::filesystem::path& file, plugin_host& host,
                              std::span<const std::string> overrides = {},
                              env_lookup env = getenv_lookup);

// The core's own sections (also printed by `tandem plugins --schema`).
config_schema engine_schema();
config_schema server_schema();
config_schema chat_schema();
config_schema topology_schema();

}  // namespace tandem
