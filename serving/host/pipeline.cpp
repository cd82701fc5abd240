// load_pipeline: parse -> merge overrides -> check every section against its schema ->
// resolve plugins -> cross-check the topology, collecting every error on the way.
#include "tandem/pipeline.hpp"

#include "diag_sink.hpp"
#include "overrides.hpp"
#include "settings_check.hpp"
#include "suggest.hpp"
#include "tandem/drafter.hpp"
#include "tandem/logger.hpp"
#include "tandem/transport.hpp"
#include "yaml_reader.hpp"

namespace tandem {
namespace {

using namespace host_detail;

std::string searched(const plugin_host& host) {
  std::string s;
  for (const auto& d : host.search_path()) s += (s.empty() ? "" : ", ") + d.string();
  return "searched " + (s.empty() ? "no directories (set TANDEM_PLUGIN_PATH)" : s);
}

class loader {
 public:
  loader(const std::filesystem::path& file, plugin_host& host, env_lookup env)
      : file_(file.string()), host_(host), env_(std::move(env)) {}

  pipeline_result run(std::span<const std::string> overrides);

 private:
  std::optional<std::string> check_model();
  std::optional<plugin_choice> check_plugin(const section_info& info);
  void check_drafter(const plugin_choice& c);
  std::optional<std::string> plugin_name(const section_info& info, const raw_value& v);
  void report_unknown_plugin(const section_info& info, const std::string& written,
                             const std::string& full, const raw_value& v);
  config check_core(std::string_view name, config_schema schema);
  void check_topology(const config& cfg, pipeline_spec& spec);
  void check_transport_serves(pipeline_spec& spec);
  source_pos pos_of(std::string_view section, std::string_view key);

  std::string file_;
  plugin_host& host_;
  env_lookup env_;
  diag_sink sink_;
  raw_document doc_;
  std::vector<override_setting> ovs_;
};

pipeline_result loader::run(std::span<const std::string> overrides) {
  std::optional<raw_document> doc = read_pipeline_yaml(file_, sink_);
  ovs_ = parse_overrides(overrides, sink_);
  if (!doc) return {std::nullopt, sink_.sorted()};
  doc_ = std::move(*doc);
  apply_choice_overrides(ovs_, doc_);

  pipeline_spec spec;
  spec.file = file_;
  if (auto m = check_model()) {
    spec.model = *m;
    spec.model_pos = doc_.find("model")->entries.front().value.pos;
  }
  for (const section_info& s : known_sections()) {
    if (s.kind != section_kind::plugin) continue;
    const size_t errors_before = sink_.size();
    std::optional<plugin_choice> c = check_plugin(s);
    if (!c) continue;
    switch (s.iface) {
      case plugin_interface::weight_format: spec.weights = std::move(*c); break;
      case plugin_interface::backend:       spec.backend = std::move(*c); break;
      case plugin_interface::scheduler:     spec.scheduler = std::move(*c); break;
      case plugin_interface::transport:     spec.transport = std::move(*c); break;
      case plugin_interface::drafter:
        if (sink_.size() == errors_before) check_drafter(*c);  // its settings are all there
        spec.drafter = std::move(*c);
        break;
    }
  }
  spec.engine = check_core("engine", engine_schema());
  spec.server = check_core("server", server_schema());
  spec.chat = check_core("chat", chat_schema());
  check_topology(check_core("topology", topology_schema()), spec);

  pipeline_result r;
  r.errors = sink_.sorted();
  r.warnings = sink_.sorted_warnings();
  spec.warnings = r.warnings;
  if (r.errors.empty()) r.spec = std::move(spec);
  return r;
}

std::optional<std::string> loader::check_model() {
  raw_section* sec = doc_.find("model");
  if (!sec) {
    sink_.error({file_, 1, 1}, "model", "missing required section",
                "name a model manifest or a model file, e.g. 'model: smollm2-135m-instruct'");
    return std::nullopt;
  }
  const raw_value& v = sec->entries.front().value;
  if ((v.k == raw_value::kind::plain || v.k == raw_value::kind::quoted) && !v.text.empty())
    return v.text;
  sink_.error(v.pos, "model", "expected a model manifest name or a model file path, got " + shape(v));
  return std::nullopt;
}

std::optional<plugin_choice> loader::check_plugin(const section_info& info) {
  const std::string section(info.name);
  raw_section* sec = doc_.find(section);
  if (!sec) {
    if (info.required)
      sink_.error({file_, 1, 1}, section, "missing required section",
                  "add '" + section + ": { plugin: NAME }'");
    return std::nullopt;
  }
  if (sec->malformed) return std::nullopt;
  const raw_entry* entry = sec->find("plugin");
  if (!entry) {
    sink_.error(sec->key_pos, section + ".plugin",
                "missing required key (the " + section + " plugin to use" +
                    (info.iface == plugin_interface::backend ? ", or 'auto')" : ")"));
    return std::nullopt;
  }
  const raw_value v = entry->value;
  std::optional<std::string> full = plugin_name(info, v);
  if (!full) return std::nullopt;
  plugin_host::lookup_result found = host_.lookup(*full);
  if (!found.desc) {
    if (found.file_found)
      sink_.error(v.pos, section + ".plugin",
                  "plugin '" + *full + "' cannot be used: " + found.error,
                  "file " + found.file.string());
    else
      report_unknown_plugin(info, v.text, *full, v);
    return std::nullopt;
  }
  plugin_choice c{*full, {}, v.pos};
  apply_setting_overrides(ovs_, found.desc->keys(), env_, *sec, sink_);
  check_settings(*sec, *full, found.desc->keys(), "plugin", c.cfg, sink_);
  return c;
}

// The full registry name the section asks for (short names and `auto` resolved), or
// nullopt after reporting why there is none.
std::optional<std::string> loader::plugin_name(const section_info& info, const raw_value& v) {
  const std::string section(info.name), path = section + ".plugin";
  const std::string iface(name(info.iface));
  if ((v.k != raw_value::kind::plain && v.k != raw_value::kind::quoted) || v.text.empty()) {
    sink_.error(v.pos, path, "expected a plugin name such as '" + iface + ".NAME', got " + shape(v));
    return std::nullopt;
  }
  if (v.text == "auto") {
    try {
      return host_.resolve_auto(info.iface);
    } catch (const plugin_error& e) {
      sink_.error(v.pos, path, std::string("cannot resolve 'auto': ") + e.what());
      return std::nullopt;
    }
  }
  std::string full = v.text.find('.') == std::string::npos ? iface + "." + v.text : v.text;
  plugin_interface got{};
  if (plugin_host::interface_of_name(full, got) && got != info.iface) {
    sink_.error(v.pos, path,
                "'" + full + "' is a " + std::string(name(got)) + " plugin; this section needs a " +
                    iface + " plugin");
    return std::nullopt;
  }
  return full;
}

void loader::report_unknown_plugin(const section_info& info, const std::string& written,
                                   const std::string& full, const raw_value& v) {
  const std::string prefix = std::string(name(info.iface)) + ".";
  const bool short_name = written.find('.') == std::string::npos;
  std::vector<std::string> candidates;
  for (const std::string& n : host_.available_names()) {
    if (!short_name) candidates.push_back(n);
    else if (n.starts_with(prefix)) candidates.push_back(n.substr(prefix.size()));
  }
  std::string hint = did_you_mean(written, candidates);
  if (!hint.empty()) hint += ' ';
  hint += searched(host_);
  sink_.error(v.pos, std::string(info.name) + ".plugin", "unknown plugin '" + full + "'", hint);
}

// A drafter is cheap to make (no model, no device): making one here lets its own checks
// across settings (ngram's min_n <= max_n, ...) and what the engine cannot give it fail at
// validate, not at start-up.
void loader::check_drafter(const plugin_choice& c) {
  try {
    // The descriptor's factory itself, not plugin_host::create, which wraps every failure
    // in a plugin_error: a config_error keeps the setting it is about.
    const plugin_descriptor* desc = host_.lookup(c.name).desc;
    const plugin_context ctx{&default_logger(), &c.cfg};
    std::unique_ptr<plugin_object> obj(desc->create(ctx));
    auto* d = dynamic_cast<drafter*>(obj.get());
    if (!d) {
      sink_.error(c.pos, "drafter.plugin", "'" + c.name + "' does not implement the drafter interface");
      return;
    }
    // Whether a hidden-state drafter fits the target and backend is known once the model is
    // loaded: the runtime's bind_drafter refuses it at start-up, naming drafter.plugin.
    if (d->limits().max_draft < 1)
      sink_.error(c.pos, "drafter.plugin", "'" + c.name + "' proposes no draft tokens (its k is below 1)");
  } catch (const config_error& e) {
    const std::string& key = e.key_path();
    std::string message = e.what();
    if (!key.empty() && message.starts_with(key + ": ")) message.erase(0, key.size() + 2);
    const std::string setting = key.starts_with("drafter.") ? key.substr(8) : key;
    sink_.error(pos_of("drafter", setting), key.empty() ? "drafter" : key, message);
  } catch (const std::exception& e) {
    sink_.error(c.pos, "drafter.plugin", "'" + c.name + "' cannot be created: " + e.what());
  }
}

config loader::check_core(std::string_view name, config_schema schema) {
  config cfg;
  raw_section& sec = doc_.get_or_add(name);
  if (sec.malformed) return cfg;
  apply_setting_overrides(ovs_, schema, env_, sec, sink_);
  check_settings(sec, std::string(name), schema, {}, cfg, sink_);
  return cfg;
}

source_pos loader::pos_of(std::string_view section, std::string_view key) {
  if (raw_section* s = doc_.find(section)) {
    if (const raw_entry* e = s->find(key)) return e->value.pos;
    if (!s->key_pos.file.empty()) return s->key_pos;
  }
  return {file_, 1, 1};
}

void loader::check_topology(const config& cfg, pipeline_spec& spec) {
  for (const char* k : {"ranks", "tensor_parallel", "pipeline_parallel", "expert_parallel"})
    if (!cfg.has(k)) return;  // a bad value was reported already
  topology& t = spec.topo;
  t.ranks = static_cast<int>(cfg.get_int("ranks"));
  t.tensor_parallel = static_cast<int>(cfg.get_int("tensor_parallel"));
  t.pipeline_parallel = static_cast<int>(cfg.get_int("pipeline_parallel"));
  t.expert_parallel = static_cast<int>(cfg.get_int("expert_parallel"));
  if (cfg.has("heartbeat_s")) t.heartbeat_s = cfg.get_number("heartbeat_s");
  const int64_t product = int64_t{t.tensor_parallel} * t.pipeline_parallel;
  if (t.ranks != product)
    sink_.error(pos_of("topology", "ranks"), "topology.ranks",
                "ranks (" + std::to_string(t.ranks) + ") must equal tensor_parallel * "
                "pipeline_parallel (" + std::to_string(t.tensor_parallel) + " * " +
                    std::to_string(t.pipeline_parallel) + " = " + std::to_string(product) + ")");
  if (t.ranks % t.expert_parallel != 0)
    sink_.error(pos_of("topology", "expert_parallel"), "topology.expert_parallel",
                "expert_parallel (" + std::to_string(t.expert_parallel) + ") must divide ranks (" +
                    std::to_string(t.ranks) + ")");
  check_transport_serves(spec);
}

// The transport declares the world sizes it serves in its schema (tandem/transport.hpp):
// topology.ranks must be among them, and the host, not the file, sets world_size.
void loader::check_transport_serves(pipeline_spec& spec) {
  if (spec.transport.name.empty()) return;  // the transport section was reported already
  const plugin_host::lookup_result found = host_.lookup(spec.transport.name);
  if (!found.desc) return;
  const topology& t = spec.topo;
  const config_key* world = nullptr;
  const config_key* rank = nullptr;
  for (const config_key& k : found.desc->keys()) {
    if (std::string_view(k.key) == transport_keys::world_size) world = &k;
    if (std::string_view(k.key) == transport_keys::rank) rank = &k;
  }
  const int lo = world && world->min < world->max ? static_cast<int>(world->min) : 1;
  const int hi = world && world->min < world->max ? static_cast<int>(world->max) : 1;
  if (t.ranks < lo || t.ranks > hi) {
    const std::string serves = lo == hi ? std::to_string(lo) + (lo == 1 ? " rank" : " ranks")
                                        : std::to_string(lo) + " to " + std::to_string(hi) + " ranks";
    sink_.error(pos_of("topology", "ranks"), "topology.ranks",
                spec.transport.name + " serves " + serves + " but topology.ranks is " + std::to_string(t.ranks),
                lo == 1 && hi == 1 ? "use a multi-rank transport such as transport.gloo" : "");
    return;
  }
  if (raw_section* sec = doc_.find("transport"); sec && sec->find(transport_keys::world_size))
    sink_.error(pos_of("transport", transport_keys::world_size), "transport.world_size",
                "set by the host from topology.ranks; remove it");
  if (!world) return;
  spec.transport.cfg.set(transport_keys::world_size, int64_t{t.ranks});
  if (rank && spec.transport.cfg.has(transport_keys::rank) &&
      spec.transport.cfg.get_int(transport_keys::rank) >= t.ranks)
    sink_.error(pos_of("transport", transport_keys::rank), "transport.rank",
                "rank " + std::to_string(spec.transport.cfg.get_int(transport_keys::rank)) +
                    " does not exist: topology.ranks is " + std::to_string(t.ranks) + " (ranks are 0 to " +
                    std::to_string(t.ranks - 1) + ")");
}

}  // namespace

pipeline_result load_pipeline(const std::filesystem::path& file, plugin_host& host,
                              std::span<const std::string> overrides, env_lookup env) {
  return loader(file, host, std::move(env)).run(overrides);
}

}  // namespace tandem
