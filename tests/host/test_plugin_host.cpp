#define BOOST_TEST_MODULE plugin_host
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <fstream>

#include "tandem/plugin_host.hpp"
#include "tandem/scheduler.hpp"
#include "tandem/backend.hpp"
#include "temp_dir.hpp"

namespace fs = std::filesystem;
using namespace tandem;

namespace {

const fs::path plugins_dir = TANDEM_TEST_PLUGIN_DIR;

plugin_host test_host() { return plugin_host({plugins_dir}); }

std::string find_error(plugin_host& host, std::string_view name) {
  try {
    host.find(name);
  } catch (const plugin_error& e) {
    BOOST_TEST(e.plugin() == std::string(name));
    return e.what();
  }
  BOOST_FAIL("find(" << name << ") did not throw");
  return {};
}

bool contains(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return true;
  BOOST_TEST_MESSAGE("'" << s << "' lacks '" << part << "'");
  return false;
}

}  // namespace

BOOST_AUTO_TEST_CASE(finds_a_valid_plugin_and_reads_its_descriptor) {
  plugin_host host = test_host();
  const plugin_descriptor& d = host.find("scheduler.test_ok");
  BOOST_TEST(std::string(d.name) == "scheduler.test_ok");
  BOOST_TEST((d.interface == plugin_interface::scheduler));
  BOOST_TEST(d.keys().size() == 5u);
  BOOST_TEST(host.file_of("scheduler.test_ok") == plugins_dir / "scheduler.test_ok.so");
  BOOST_TEST(&host.find("scheduler.test_ok") == &d);  // loaded once
}

BOOST_AUTO_TEST_CASE(rejects_each_kind_of_broken_plugin_with_its_reason) {
  plugin_host host = test_host();
  BOOST_TEST(contains(find_error(host, "scheduler.test_no_entry"), "no entry symbol"));
  BOOST_TEST(contains(find_error(host, "scheduler.test_bad_version"), "API version 999"));
  BOOST_TEST(contains(find_error(host, "scheduler.test_name_mismatch"),
                      "named 'scheduler.other_name'"));
  BOOST_TEST(contains(find_error(host, "scheduler.test_wrong_iface"),
                      "implements 'backend' but the name says 'scheduler'"));
  BOOST_TEST(contains(find_error(host, "scheduler.test_bad_only_if"),
                      "its schema is malformed: setting 'victims': only_if 'max_batch!=1,preempt=sometimes': "
                      "preempt takes bool, not 'sometimes'"));
  auto r = host.lookup("scheduler.test_bad_version");
  BOOST_TEST(r.file_found);
  BOOST_TEST(!r.desc);
}

BOOST_AUTO_TEST_CASE(a_missing_plugin_names_every_directory_and_a_suggestion) {
  temp_dir extra;
  plugin_host host({extra.path(), plugins_dir});
  std::string msg = find_error(host, "scheduler.test_k");
  BOOST_TEST(contains(msg, extra.path().string()));
  BOOST_TEST(contains(msg, plugins_dir.string()));
  BOOST_TEST(contains(msg, "did you mean 'scheduler.test_ok'?"));
  BOOST_TEST(!contains(find_error(host, "scheduler.zzzzzzzz"), "did you mean"));
  BOOST_TEST(!host.lookup("../plugins/scheduler.test_ok").file_found);  // names are not paths
}

BOOST_AUTO_TEST_CASE(a_file_that_is_not_a_library_is_reported_not_crashed_on) {
  temp_dir dir;
  std::ofstream(dir.path() / "backend.garbage.so") << "not an ELF file\n";
  plugin_host host({dir.path()});
  BOOST_TEST(contains(find_error(host, "backend.garbage"), "cannot load"));
  plugin_host::discovery d = host.discover();
  BOOST_TEST(d.plugins.empty());
  BOOST_REQUIRE(d.errors.size() == 1u);
  BOOST_TEST(contains(d.errors[0], "backend.garbage.so"));
}

BOOST_AUTO_TEST_CASE(discovery_lists_good_plugins_and_reports_broken_ones) {
  plugin_host host = test_host();
  plugin_host::discovery d = host.discover();
  std::vector<std::string> names;
  for (const plugin_descriptor* p : d.plugins) names.emplace_back(p->name);
  std::vector<std::string> want{"backend.test_ok",  "backend.test_probe0", "backend.test_throws",
                                "drafter.test_ok",  "scheduler.test_ok",   "transport.local",
                                "transport.test_ok", "weights.test_ok"};
  BOOST_TEST(names == want, boost::test_tools::per_element());
  BOOST_TEST(d.errors.size() == 5u);  // the five broken scheduler.test_* libraries
}

BOOST_AUTO_TEST_CASE(plugins_are_found_one_level_down_and_the_first_directory_wins) {
  temp_dir dir;
  fs::create_directories(dir.path() / "sub");
  fs::copy_file(plugins_dir / "drafter.test_ok.so", dir.path() / "sub" / "drafter.test_ok.so");
  plugin_host host({dir.path(), plugins_dir});
  host.find("drafter.test_ok");
  BOOST_TEST(host.file_of("drafter.test_ok") == dir.path() / "sub" / "drafter.test_ok.so");
  host.find("weights.test_ok");
  BOOST_TEST(host.file_of("weights.test_ok") == plugins_dir / "weights.test_ok.so");
}

BOOST_AUTO_TEST_CASE(auto_picks_the_highest_scoring_runnable_plugin) {
  plugin_host host = test_host();
  BOOST_TEST(host.resolve_auto(plugin_interface::backend) == "backend.test_ok");
  BOOST_TEST(host.probe("backend.test_probe0").score == 0);
  BOOST_TEST(host.probe("backend.test_probe0").reason == "no test accelerator here");
  BOOST_TEST(host.probe("scheduler.test_ok").score == 1);  // no probe: runnable, score 1
  BOOST_TEST(host.resolve_auto(plugin_interface::drafter) == "drafter.test_ok");
}

BOOST_AUTO_TEST_CASE(auto_loads_only_the_candidates_of_its_interface) {
  plugin_host host = test_host();
  BOOST_TEST(host.resolve_auto(plugin_interface::backend) == "backend.test_ok");
  BOOST_TEST(!host.file_of("backend.test_probe0").empty());  // a candidate: loaded and probed
  for (const char* other : {"scheduler.test_ok", "weights.test_ok", "drafter.test_ok", "transport.test_ok"})
    BOOST_TEST(host.file_of(other).empty(), other << " was loaded for backend: auto");
}

BOOST_AUTO_TEST_CASE(auto_without_a_runnable_plugin_is_a_plugin_error) {
  temp_dir dir;
  fs::copy_file(plugins_dir / "backend.test_probe0.so", dir.path() / "backend.test_probe0.so");
  plugin_host host({dir.path()});
  try {
    host.resolve_auto(plugin_interface::backend);
    BOOST_FAIL("resolve_auto did not throw");
  } catch (const plugin_error& e) {
    BOOST_TEST(contains(e.what(), "backend.test_probe0: no test accelerator here"));
  }
  BOOST_CHECK_THROW(host.resolve_auto(plugin_interface::scheduler), plugin_error);
}

BOOST_AUTO_TEST_CASE(create_returns_a_working_object_that_outlives_the_host) {
  config cfg;
  cfg.set("max_batch", int64_t{2});
  std::unique_ptr<scheduler> s;
  {
    plugin_host host = test_host();
    s = host.create<scheduler>("scheduler.test_ok", cfg);
  }
  std::vector<sched_request> waiting(3);
  for (uint64_t i = 0; i < 3; ++i) waiting[i] = {i, 10, 10, 0};
  sched_decision d = s->schedule({{}, waiting, 100, 100, 16, 0});
  BOOST_REQUIRE(d.items.size() == 2u);  // max_batch from the config
  BOOST_TEST(d.items[1].id == 1u);
  BOOST_TEST(d.items[1].n_tokens == 10);
}

BOOST_AUTO_TEST_CASE(create_checks_the_interface_and_wraps_factory_errors) {
  plugin_host host = test_host();
  config cfg;
  cfg.set("max_batch", int64_t{2});
  BOOST_CHECK_THROW(host.create<backend>("scheduler.test_ok", cfg), plugin_error);
  try {
    host.create<backend>("backend.test_throws", cfg);
    BOOST_FAIL("create did not throw");
  } catch (const plugin_error& e) {
    BOOST_TEST(e.plugin() == "backend.test_throws");
    BOOST_TEST(contains(e.what(), "test factory failure"));
  }
  BOOST_TEST(host.create<backend>("backend.test_ok", cfg)->describe() == "test backend");
  BOOST_CHECK_THROW(host.create<backend>("backend.nope", cfg), plugin_error);
}

BOOST_AUTO_TEST_CASE(default_search_path_starts_with_the_environment) {
  const char* old = std::getenv("TANDEM_PLUGIN_PATH");
  std::string saved = old ? old : "";
  ::setenv("TANDEM_PLUGIN_PATH", "/nonexistent/a::/nonexistent/b", 1);
  std::vector<fs::path> p = plugin_host::default_search_path();
  BOOST_REQUIRE(p.size() >= 2u);
  BOOST_TEST(p[0] == fs::path("/nonexistent/a"));
  BOOST_TEST(p[1] == fs::path("/nonexistent/b"));
  // The test runs from <build>/tests/host: the build tree's plugins dir comes after.
  fs::path build_plugins = fs::path(TANDEM_TEST_BUILD_ROOT) / "plugins";
  if (fs::is_directory(build_plugins)) {
    BOOST_TEST(p.back() == build_plugins);
  }
  old ? ::setenv("TANDEM_PLUGIN_PATH", saved.c_str(), 1) : ::unsetenv("TANDEM_PLUGIN_PATH");
}

BOOST_AUTO_TEST_CASE(names_map_to_interfaces_by_prefix) {
  plugin_interface i{};
  BOOST_TEST(plugin_host::interface_of_name("weights.gguf", i));
  BOOST_TEST((i == plugin_interface::weight_format));
  BOOST_TEST(plugin_host::interface_of_name("transport.nccl", i));
  BOOST_TEST((i == plugin_interface::transport));
  BOOST_TEST(!plugin_host::interface_of_name("backend", i));
  BOOST_TEST(!plugin_host::interface_of_name("backend.", i));
  BOOST_TEST(!plugin_host::interface_of_name("libfoo.so", i));
}
