#define BOOST_TEST_MODULE pipeline
#include <boost/test/unit_test.hpp>

#include <algorithm>

// load_pipeline on the good pipelines: the typed result, defaults, `auto`, short names and
// the precedence file < environment < command line. (Diagnostics: test_pipeline_golden.)
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <map>

#include "../../serving/host/settings_check.hpp"
#include "../../serving/host/suggest.hpp"
#include "tandem/pipeline.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

const fs::path plugins_dir = TANDEM_TEST_PLUGIN_DIR;

fs::path good(const std::string& name) {
  return fs::path(std::getenv("TANDEM_SOURCE_ROOT")) / "tests/pipelines/good" / name;
}

env_lookup env_from(std::map<std::string, std::string> vars) {
  return [vars](const std::string& k) -> std::optional<std::string> {
    auto it = vars.find(k);
    return it == vars.end() ? std::nullopt : std::optional<std::string>(it->second);
  };
}

const env_lookup no_env = env_from({});

pipeline_spec load_ok(const fs::path& file, std::vector<std::string> sets = {},
                      const env_lookup& env = no_env) {
  plugin_host host({plugins_dir});
  pipeline_result r = load_pipeline(file, host, sets, env);
  for (const diagnostic& d : r.errors) BOOST_ERROR(d.str());
  BOOST_REQUIRE(r.spec.has_value());
  return *r.spec;
}

}  // namespace

BOOST_AUTO_TEST_CASE(a_full_pipeline_gives_typed_settings) {
  pipeline_spec s = load_ok(good("full.yaml"));
  BOOST_TEST(s.model == "./models/test-model.gguf");
  BOOST_TEST(s.weights.name == "weights.test_ok");
  BOOST_TEST(s.weights.cfg.get_bool("mmap") == false);
  BOOST_TEST(s.backend.cfg.get_int("threads") == 4);
  BOOST_TEST(s.scheduler.cfg.get_int("max_batch") == 16);
  BOOST_TEST(s.scheduler.cfg.get_string("policy") == "lifo");
  BOOST_TEST(s.scheduler.cfg.get_bool("preempt") == true);
  BOOST_TEST(s.scheduler.cfg.get_number("ratio") == 1.0);
  BOOST_TEST(s.scheduler.pos.line == 10);
  BOOST_TEST(s.scheduler.pos.col == 11);
  BOOST_REQUIRE(s.drafter.has_value());
  BOOST_TEST(s.drafter->cfg.get_int("k") == 4);
  BOOST_TEST(s.drafter->cfg.get_string("mode") == "sample");
  BOOST_TEST(s.engine.get_int("seed") == -7);
  BOOST_TEST(s.engine.get_int("page_size") == 32);
  BOOST_TEST(s.server.get_string("host") == "0.0.0.0");
  BOOST_TEST(s.topo.ranks == 4);
  BOOST_TEST(s.topo.pipeline_parallel == 2);
  BOOST_TEST(s.topo.expert_parallel == 4);
}

BOOST_AUTO_TEST_CASE(defaults_short_names_and_auto_are_resolved) {
  pipeline_spec s = load_ok(good("minimal.yaml"));
  BOOST_TEST(s.weights.name == "weights.test_ok");
  BOOST_TEST(s.backend.name == "backend.test_ok");  // auto: probe0 scores 0, test_ok 5
  BOOST_TEST(s.scheduler.name == "scheduler.test_ok");
  BOOST_TEST(s.transport.name == "transport.local");
  BOOST_TEST(!s.drafter.has_value());
  BOOST_TEST(s.scheduler.cfg.get_int("max_batch") == 8);
  BOOST_TEST(s.scheduler.cfg.get_int("max_wait_ms") == 1500);
  BOOST_TEST(s.scheduler.cfg.values().size() == 5u);  // every schema key present
  BOOST_TEST(s.engine.get_int("page_size") == 16);
  BOOST_TEST(s.engine.get_int("max_model_len") == 0);
  BOOST_TEST(s.server.get_int("port") == 8080);
  BOOST_TEST(s.server.get_string("host") == "127.0.0.1");
  BOOST_TEST(s.topo.ranks == 1);
  BOOST_TEST(s.topo.tensor_parallel == 1);
}

BOOST_AUTO_TEST_CASE(environment_overrides_the_file_and_the_command_line_overrides_both) {
  const fs::path f = good("two_ranks.yaml");
  BOOST_TEST(load_ok(f).scheduler.cfg.get_int("max_wait_ms") == 1500);
  auto env = env_from({{"TANDEM_TEST_MAX_WAIT_MS", "200"}});
  BOOST_TEST(load_ok(f, {}, env).scheduler.cfg.get_int("max_wait_ms") == 200);
  pipeline_spec s = load_ok(f, {"scheduler.max_wait_ms = 300", "scheduler.max_batch=2"}, env);
  BOOST_TEST(s.scheduler.cfg.get_int("max_wait_ms") == 300);
  BOOST_TEST(s.scheduler.cfg.get_int("max_batch") == 2);
  BOOST_TEST(s.scheduler.cfg.get_number("ratio") == 0.25);  // untouched file value
}

BOOST_AUTO_TEST_CASE(the_command_line_can_swap_plugins_add_sections_and_set_the_model) {
  pipeline_spec s = load_ok(good("minimal.yaml"),
                            {"backend.plugin=test_probe0", "drafter.plugin=test_ok", "drafter.k=3",
                             "model=/tmp/other.gguf", "topology.ranks=1", "server.port=9000"});
  BOOST_TEST(s.backend.name == "backend.test_probe0");  // named explicitly: not probed
  BOOST_REQUIRE(s.drafter.has_value());
  BOOST_TEST(s.drafter->cfg.get_int("k") == 3);
  BOOST_TEST(s.drafter->pos.file == "<command line>");
  BOOST_TEST(s.drafter->pos.col == 2);  // the second override named it
  BOOST_TEST(s.model == "/tmp/other.gguf");
  BOOST_TEST(s.server.get_int("port") == 9000);
}

// config_key::only_if: a key the user sets is checked against its siblings' final values;
// left at its default it never is. (The diagnostics themselves: the golden only_if*.yaml.)
BOOST_AUTO_TEST_CASE(only_if_holds_when_the_siblings_allow_the_key) {
  const fs::path f = good("two_ranks.yaml");  // backend.test_ok; topology.heartbeat_s with 2 ranks
  pipeline_spec s = load_ok(f, {"backend.mma_rows=32", "backend.invariant=false", "backend.cache_policy=fifo"});
  BOOST_TEST(s.backend.cfg.get_int("mma_rows") == 32);
  BOOST_TEST(s.backend.cfg.get_string("cache_policy") == "fifo");
  BOOST_TEST(s.topo.heartbeat_s == 1.0);
  // Set to the value its default has, a voided key is still set: an error.
  plugin_host host({plugins_dir});
  const std::vector<std::string> sets{"backend.mma_rows=16", "backend.q8=off"};
  pipeline_result r = load_pipeline(f, host, sets, no_env);
  BOOST_TEST(!r.spec.has_value());
  BOOST_REQUIRE(r.errors.size() == 1u);
  BOOST_TEST(r.errors[0].key_path == "backend.mma_rows");
  BOOST_TEST(r.errors[0].message == "has no effect in backend.test_ok with q8: false from the command line");
  BOOST_TEST(r.errors[0].hint == "remove it, or set q8: true");
  // The voiding sibling alone, the voided key at its default: fine.
  s = load_ok(f, {"backend.q8=off", "backend.invariant=true", "backend.cache_mb=0"});
  BOOST_TEST(s.backend.cfg.get_int("mma_rows") == 16);
  BOOST_TEST(s.backend.cfg.get_bool("invariant") == true);
}

BOOST_AUTO_TEST_CASE(an_environment_variable_sets_a_key_as_the_file_does) {
  const fs::path f = good("two_ranks.yaml");
  BOOST_TEST(load_ok(f, {}, env_from({{"TANDEM_TEST_MMA_ROWS", "8"}})).backend.cfg.get_int("mma_rows") == 8);
  plugin_host host({plugins_dir});
  // The key from the environment, the sibling that voids it from the command line (a later
  // layer): a warning, the pipeline loads.
  pipeline_result r = load_pipeline(f, host, std::vector<std::string>{"backend.q8=off"},
                                    env_from({{"TANDEM_TEST_MMA_ROWS", "8"}}));
  BOOST_TEST(r.errors.size() == 0u);
  BOOST_REQUIRE(r.warnings.size() == 1u);
  BOOST_TEST(r.warnings[0].str() ==
             "<environment>: warning: backend.mma_rows: $TANDEM_TEST_MMA_ROWS: has no effect in backend.test_ok "
             "with q8: false from the command line, set after it: ignored");
  BOOST_REQUIRE(r.spec.has_value());
  BOOST_TEST(r.spec->warnings.size() == 1u);
}

BOOST_AUTO_TEST_CASE(a_key_voided_by_a_later_layer_is_a_warning_not_an_error) {
  // The file sets a key, the command line then switches a sibling that voids it (trying a
  // variant of a pipeline): the pipeline loads, the file's key is ignored and said so. The
  // same key voided by the file itself, or set on the command line against the file's
  // sibling, stays an error.
  plugin_host host({plugins_dir});
  const fs::path f = good("two_ranks.yaml");  // sets topology.heartbeat_s with ranks: 2
  const std::vector<std::string> one{"topology.ranks=1", "topology.tensor_parallel=1", "topology.expert_parallel=1"};
  pipeline_result r = load_pipeline(f, host, one, no_env);
  for (const diagnostic& d : r.errors) BOOST_TEST_MESSAGE(d.str());
  BOOST_TEST(r.errors.empty());
  BOOST_REQUIRE(r.warnings.size() == 1u);
  BOOST_TEST(r.warnings[0].key_path == "topology.heartbeat_s");
  BOOST_TEST(r.warnings[0].warning);
  BOOST_TEST(r.warnings[0].str().find(": warning: ") != std::string::npos);
  std::vector<std::string> both = one;
  both.push_back("topology.heartbeat_s=2");
  r = load_pipeline(f, host, both, no_env);
  BOOST_REQUIRE(r.errors.size() == 1u);  // both from the command line: the user set it against ranks 1
  BOOST_TEST(r.errors[0].key_path == "topology.heartbeat_s");
}

BOOST_AUTO_TEST_CASE(a_sibling_with_a_bad_value_voids_nothing) {
  // Its own error is enough; the key it would void is not reported on top of it.
  plugin_host host({plugins_dir});
  const std::vector<std::string> sets{"backend.mma_rows=8", "backend.q8=maybe"};
  pipeline_result r = load_pipeline(good("two_ranks.yaml"), host, sets, no_env);
  BOOST_REQUIRE(r.errors.size() == 1u);
  BOOST_TEST(r.errors[0].key_path == "backend.q8");
}

BOOST_AUTO_TEST_CASE(only_if_strings_parse_or_say_why_not) {
  using namespace tandem::host_detail;
  const config_key keys[] = {
      {"on", config_type::boolean, "true", ""},
      {"n", config_type::integer, "4", "", 0, 64},
      {"x", config_type::number, "0.5", "", 0, 1},
      {"mode", config_type::string, "a", "", 0, 0, "a|b"},
      {"name", config_type::string, "", ""},
      {"k", config_type::integer, "1", ""},
  };
  auto why = [&](const char* only_if) {
    config_key k = keys[5];
    k.only_if = only_if;
    std::vector<config_key> schema(std::begin(keys), std::end(keys) - 1);
    schema.push_back(k);
    auto r = parse_only_if(schema.back(), schema);
    const std::string* e = std::get_if<std::string>(&r);
    // The schema check at plugin load says the same, naming the setting.
    BOOST_TEST(only_if_problem(schema) ==
               (e ? "setting 'k': only_if '" + std::string(only_if) + "': " + *e : std::string()));
    return e ? *e : std::string();
  };
  // Well-formed: both operators, every type, spaces around the parts.
  config_key k = keys[5];
  k.only_if = "on=false, n != 0 ,x=0.25,mode=b,name=z";
  std::vector<config_key> schema(std::begin(keys), std::end(keys) - 1);
  schema.push_back(k);
  auto ok = parse_only_if(schema.back(), schema);
  BOOST_REQUIRE(std::holds_alternative<std::vector<only_if_condition>>(ok));
  const auto& conds = std::get<std::vector<only_if_condition>>(ok);
  BOOST_REQUIRE(conds.size() == 5u);
  BOOST_TEST(std::string(conds[0].key->key) == "on");
  BOOST_TEST(conds[0].equal);
  BOOST_TEST((conds[0].value == config_value{false}));
  BOOST_TEST(!conds[1].equal);
  BOOST_TEST((conds[1].value == config_value{int64_t{0}}));
  BOOST_TEST((conds[2].value == config_value{0.25}));
  BOOST_TEST((conds[3].value == config_value{std::string("b")}));
  BOOST_TEST(only_if_problem(schema) == "");
  BOOST_TEST(why(nullptr) == "");
  // Malformed.
  BOOST_TEST(why("") == "an empty condition (write KEY=VALUE or KEY!=VALUE, separated by commas)");
  BOOST_TEST(why("on=true,") == "an empty condition (write KEY=VALUE or KEY!=VALUE, separated by commas)");
  BOOST_TEST(why("on") == "'on' is not KEY=VALUE or KEY!=VALUE");
  BOOST_TEST(why("=true") == "'=true' is not KEY=VALUE or KEY!=VALUE");
  BOOST_TEST(why("!=true") == "'!=true' is not KEY=VALUE or KEY!=VALUE");
  BOOST_TEST(why("on=") == "'on=' is not KEY=VALUE or KEY!=VALUE");
  BOOST_TEST(why("on==true") == "'on==true' is not KEY=VALUE or KEY!=VALUE");
  BOOST_TEST(why("zzzz=true") == "no setting 'zzzz' in the schema");
  BOOST_TEST(why("mdoe=a") == "no setting 'mdoe' in the schema (did you mean 'mode'?)");
  BOOST_TEST(why("k=1") == "'k' is the setting itself");
  BOOST_TEST(why("on=maybe") == "on takes bool, not 'maybe'");
  BOOST_TEST(why("n=4.5") == "n takes int in 0..64, not '4.5'");
  BOOST_TEST(why("n!=65") == "n takes int in 0..64, not '65'");
  BOOST_TEST(why("x=2") == "x takes float in 0..1, not '2'");
  BOOST_TEST(why("mode=c") == "mode takes string (a|b), not 'c'");
  const config_key bad[] = {{"a", config_type::boolean, "true", ""},
                            {"b", config_type::boolean, "true", "", 0, 0, nullptr, nullptr, "a=yes,c=1"}};
  BOOST_TEST(only_if_problem(bad) == "setting 'b': only_if 'a=yes,c=1': no setting 'c' in the schema");
}

// backend.cuda's own schema, read without a GPU (the check runs before any CUDA call);
// skipped where the build has no backend.cuda.
BOOST_AUTO_TEST_CASE(backend_cuda_rejects_the_settings_batch_invariant_voids) {
  plugin_host host(plugin_host::default_search_path());
  plugin_host::lookup_result found = host.lookup("backend.cuda");
  if (!found.file_found) {
    BOOST_TEST_MESSAGE("backend.cuda is not built here: skipped");
    return;
  }
  BOOST_REQUIRE_MESSAGE(found.desc, "backend.cuda.so cannot be loaded: " << found.error);
  temp_dir dir;
  const fs::path file = dir.path() / "cuda.yaml";
  std::ofstream(file) << "model: test-model\n"
                         "weights: { plugin: gguf }\n"
                         "backend: { plugin: cuda, batch_invariant: true, mma_max_rows: 32, gemm: true }\n"
                         "scheduler: { plugin: fcfs }\n"
                         "transport: { plugin: local }\n";
  pipeline_result r = load_pipeline(file, host, {}, no_env);
  BOOST_TEST(!r.spec.has_value());
  std::vector<std::string> got;
  for (const diagnostic& d : r.errors) got.push_back(d.str().substr(file.string().size()));
  const std::vector<std::string> want{
      ":3:49: error: backend.mma_max_rows: has no effect in backend.cuda with batch_invariant: true "
      "(remove it, or set batch_invariant: false)",
      ":3:67: error: backend.gemm: has no effect in backend.cuda with batch_invariant: true "
      "(remove it, or set batch_invariant: false)"};
  BOOST_TEST(got == want, boost::test_tools::per_element());
  // Left to their defaults, they are no error; set where they act, neither.
  auto errors = [&](std::vector<std::string> sets) {
    std::ofstream(file) << "model: test-model\nweights: { plugin: gguf }\nbackend: { plugin: cuda }\n"
                           "scheduler: { plugin: fcfs }\ntransport: { plugin: local }\n";
    pipeline_result p = load_pipeline(file, host, sets, no_env);
    std::string all;
    for (const diagnostic& d : p.errors) all += d.str() + "\n";
    return all;
  };
  BOOST_TEST(errors({"backend.batch_invariant=true"}) == "");
  BOOST_TEST(errors({"backend.q8_activations=false"}) == "");
  BOOST_TEST(errors({"backend.mma_max_rows=32", "backend.gemm=false", "backend.memory_utilization=0.5"}) == "");
  BOOST_TEST(errors({"backend.q8_activations=false", "backend.mma_max_rows=0"}) ==
             "<command line>: error: backend.mma_max_rows: has no effect in backend.cuda with q8_activations: "
             "false from the command line (remove it, or set q8_activations: true)\n");
  BOOST_TEST(errors({"backend.memory_mb=4096", "backend.memory_utilization=0.5"}) ==
             "<command line>: error: backend.memory_utilization: has no effect in backend.cuda with memory_mb: "
             "4096 from the command line (remove it, or set memory_mb: 0)\n");
}

BOOST_AUTO_TEST_CASE(the_process_environment_is_read_by_default) {
  ::setenv("TANDEM_TEST_MAX_WAIT_MS", "42", 1);
  plugin_host host({plugins_dir});
  pipeline_result r = load_pipeline(good("minimal.yaml"), host);
  ::unsetenv("TANDEM_TEST_MAX_WAIT_MS");
  BOOST_REQUIRE(r.spec.has_value());
  BOOST_TEST(r.spec->scheduler.cfg.get_int("max_wait_ms") == 42);
}

BOOST_AUTO_TEST_CASE(auto_without_a_runnable_backend_is_reported) {
  temp_dir dir;
  for (const char* p : {"backend.test_probe0", "weights.test_ok", "scheduler.test_ok", "transport.local"})
    fs::copy_file(plugins_dir / (std::string(p) + ".so"), dir.path() / (std::string(p) + ".so"));
  plugin_host host({dir.path()});
  pipeline_result r = load_pipeline(good("minimal.yaml"), host, {}, no_env);
  BOOST_TEST(!r.spec.has_value());
  BOOST_REQUIRE(r.errors.size() == 1u);
  BOOST_TEST(r.errors[0].key_path == "backend.plugin");
  BOOST_TEST(r.errors[0].pos.line == 5);
  BOOST_TEST(r.errors[0].message.find("no test accelerator here") != std::string::npos);
}

BOOST_AUTO_TEST_CASE(an_unreadable_file_is_one_diagnostic) {
  plugin_host host({plugins_dir});
  pipeline_result r = load_pipeline("/nonexistent/p.yaml", host, {}, no_env);
  BOOST_REQUIRE(r.errors.size() == 1u);
  BOOST_TEST(r.errors[0].str() == "/nonexistent/p.yaml: error: cannot read the file: "
                                  "No such file or directory");
}

BOOST_AUTO_TEST_CASE(diagnostics_print_in_compiler_format) {
  diagnostic d;
  d.pos = {"p.yaml", 3, 7};
  d.key_path = "scheduler.max_bacth";
  d.message = "unknown setting";
  d.hint = "did you mean 'x'?";
  BOOST_TEST(d.str() == "p.yaml:3:7: error: scheduler.max_bacth: unknown setting (did you mean 'x'?)");
  diagnostic e;
  e.pos = {"<command line>", 0, 2};
  e.message = "'x' is not a key=value setting";
  BOOST_TEST(e.str() == "<command line>: error: 'x' is not a key=value setting");
}

BOOST_AUTO_TEST_CASE(suggestions_use_damerau_levenshtein) {
  using namespace tandem::host_detail;
  BOOST_TEST(edit_distance("max_bacth", "max_batch") == 1u);  // one transposition
  BOOST_TEST(edit_distance("kitten", "sitting") == 3u);
  BOOST_TEST(edit_distance("", "ab") == 2u);
  BOOST_TEST(edit_distance("Port", "port") == 0u);
  std::vector<std::string> keys{"max_batch", "max_wait_ms", "policy"};
  BOOST_TEST(did_you_mean("max_bach", keys) == "did you mean 'max_batch'?");
  BOOST_TEST(did_you_mean("colour", keys) == "");
  BOOST_TEST(!closest("x", std::vector<std::string>{"y"}).has_value());  // too short to guess
}

BOOST_AUTO_TEST_CASE(core_schema_defaults_are_valid_values_of_their_keys) {
  for (config_schema schema : {engine_schema(), server_schema(), chat_schema(), topology_schema()}) {
    BOOST_TEST(!schema.empty());
    BOOST_TEST(host_detail::only_if_problem(schema) == "");  // plugins' are checked at load
    for (const config_key& k : schema) {
      BOOST_TEST_CONTEXT(k.key) {
        BOOST_REQUIRE(k.default_value);
        auto v = parse_config_value(k.type, k.default_value);
        BOOST_REQUIRE(v.has_value());
        if (k.type == config_type::integer && k.min < k.max) {
          BOOST_TEST(std::get<int64_t>(*v) >= k.min);
          BOOST_TEST(std::get<int64_t>(*v) <= k.max);
        }
      }
    }
  }
  std::vector<std::string> engine_keys;
  for (const config_key& k : engine_schema()) engine_keys.emplace_back(k.key);
  for (const char* want : {"max_model_len", "page_size", "kv_tokens", "seed", "prefix_caching", "retention"})
    BOOST_TEST((std::find(engine_keys.begin(), engine_keys.end(), want) != engine_keys.end()), want);
  BOOST_TEST(std::string(server_schema()[1].key) == "port");
  BOOST_TEST(server_schema()[1].max == 65535);
}

namespace {

// `levels` anchors, each a list of `fan` aliases of the one before: fan^levels leaves.
std::string alias_bomb(int levels, int fan, const std::string& tail) {
  std::string y = "engine:\n  bomb0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol, lol]\n";
  for (int l = 1; l < levels; ++l) {
    y += "  bomb" + std::to_string(l) + ": &l" + std::to_string(l) + " [";
    for (int i = 0; i < fan; ++i) y += (i ? ", *l" : "*l") + std::to_string(l - 1);
    y += "]\n";
  }
  return y + tail;
}

std::vector<diagnostic> errors_of(const std::string& yaml, std::chrono::milliseconds& took) {
  temp_dir dir;
  const fs::path file = dir.path() / "p.yaml";
  std::ofstream(file) << yaml;
  plugin_host host({plugins_dir});
  const auto t0 = std::chrono::steady_clock::now();
  pipeline_result r = load_pipeline(file, host, {}, no_env);
  took = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - t0);
  return r.errors;
}

bool mentions(const std::vector<diagnostic>& ds, const std::string& needle) {
  return std::any_of(ds.begin(), ds.end(), [&](const diagnostic& d) { return d.str().find(needle) != std::string::npos; });
}

}  // namespace

BOOST_AUTO_TEST_CASE(an_alias_bomb_is_refused_quickly) {
  // The 660-byte bomb: 9 levels of 10 aliases (10^9 leaves), 122 s before.
  for (const auto& [levels, fan] : {std::pair{9, 10}, std::pair{18, 2}, std::pair{40, 2}}) {
    std::chrono::milliseconds took{};
    const auto errs = errors_of(alias_bomb(levels, fan, ""), took);
    BOOST_TEST_INFO(levels << " levels of " << fan);
    BOOST_TEST(took.count() < 500);
    BOOST_TEST(mentions(errs, "alias"));
  }
}

BOOST_AUTO_TEST_CASE(aliases_are_checked_once_and_still_checked) {
  // Below the expansion limit, but 4^6 = 4096 paths through the alias graph; the
  // duplicate key inside the shared node is reported once, at its own line.
  std::string y = "engine:\n  d0: &l0 {a: 1, a: 2}\n";
  for (int l = 1; l < 7; ++l)
    y += "  d" + std::to_string(l) + ": &l" + std::to_string(l) + " [*l" + std::to_string(l - 1) + ", *l" +
         std::to_string(l - 1) + ", *l" + std::to_string(l - 1) + ", *l" + std::to_string(l - 1) + "]\n";
  std::chrono::milliseconds took{};
  const auto errs = errors_of(y, took);
  BOOST_TEST(took.count() < 500);
  const auto dups = std::count_if(errs.begin(), errs.end(), [](const diagnostic& d) {
    return d.str().find("duplicate key") != std::string::npos;
  });
  BOOST_TEST(dups == 1);
  BOOST_TEST(!mentions(errs, "alias bomb"));
}
