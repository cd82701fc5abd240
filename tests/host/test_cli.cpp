#define BOOST_TEST_MODULE cli_validate_plugins
#include <boost/test/unit_test.hpp>

// `tandem validate` and `tandem plugins`, called as functions with their output captured.
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include "../../cli/commands.hpp"

namespace {

const std::string plugins_dir = TANDEM_TEST_PLUGIN_DIR;

struct run_result {
  int rc;
  std::string out, err;
};

run_result call(int (*cmd)(const tandem::cli::args&), tandem::cli::args a) {
  std::ostringstream out, err;
  std::streambuf* old_out = std::cout.rdbuf(out.rdbuf());
  std::streambuf* old_err = std::cerr.rdbuf(err.rdbuf());
  int rc = -1;
  try {
    rc = cmd(a);
  } catch (...) {
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
    throw;
  }
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {rc, out.str(), err.str()};
}

bool has(const std::string& s, const std::string& part) {
  if (s.find(part) != std::string::npos) return true;
  BOOST_TEST_MESSAGE("output lacks '" << part << "':\n" << s);
  return false;
}

// The test plugins come first in the search path; the build tree's real ones follow.
struct isolated {
  isolated() {
    BOOST_REQUIRE(std::getenv("TANDEM_SOURCE_ROOT"));
    std::filesystem::current_path(std::getenv("TANDEM_SOURCE_ROOT"));
    ::setenv("TANDEM_PLUGIN_PATH", plugins_dir.c_str(), 1);
  }
};

}  // namespace

BOOST_FIXTURE_TEST_SUITE(cli, isolated)

BOOST_AUTO_TEST_CASE(validate_prints_ok_and_the_plugins_chosen) {
  // backend named explicitly: what `auto` picks depends on which real backends are built.
  run_result r = call(tandem::cli::run_validate,
                      {"tests/pipelines/good/minimal.yaml", "--set", "backend.plugin=test_ok"});
  BOOST_TEST(r.rc == 0);
  BOOST_TEST(r.err == "");
  BOOST_TEST(r.out == "tests/pipelines/good/minimal.yaml: ok (backend.test_ok, scheduler.test_ok, "
                      "weights.test_ok, transport.local)\n");
}

BOOST_AUTO_TEST_CASE(validate_prints_every_error_and_exits_1) {
  run_result r = call(tandem::cli::run_validate, {"tests/pipelines/bad/topology.yaml"});
  BOOST_TEST(r.rc == 1);
  BOOST_TEST(r.out == "");
  BOOST_TEST(r.err ==
             "tests/pipelines/bad/topology.yaml:8:10: error: topology.ranks: ranks (4) must equal "
             "tensor_parallel * pipeline_parallel (2 * 1 = 2)\n"
             "tests/pipelines/bad/topology.yaml:11:20: error: topology.expert_parallel: "
             "expert_parallel (3) must divide ranks (4)\n2 errors\n");
}

BOOST_AUTO_TEST_CASE(validate_applies_set_overrides) {
  const std::string f = "tests/pipelines/good/minimal.yaml";
  run_result r = call(tandem::cli::run_validate, {f, "--set", "scheduler.max_batch=999", "-s",
                                                  "backend.plugin=test_ok", "-s",
                                                  "drafter.plugin=test_ok", "--set=drafter.k=2"});
  BOOST_TEST(r.rc == 1);
  BOOST_TEST(r.err == "<command line>: error: scheduler.max_batch: 999 is out of range 1..64\n"
                      "1 error\n");
  r = call(tandem::cli::run_validate,
           {f, "--set", "drafter.plugin=test_ok", "--set", "drafter.k=2", "--set=backend.plugin=test_ok"});
  BOOST_TEST(r.rc == 0);
  BOOST_TEST(has(r.out, ", drafter.test_ok)"));
}

BOOST_AUTO_TEST_CASE(validate_reports_a_setting_its_siblings_void) {
  const std::string f = "tests/pipelines/good/minimal.yaml";
  run_result r = call(tandem::cli::run_validate,
                      {f, "--set", "backend.plugin=test_ok", "--set", "backend.invariant=true"});
  BOOST_TEST(r.rc == 0);  // mma_rows left at its default
  r = call(tandem::cli::run_validate, {f, "--set", "backend.plugin=test_ok", "--set", "backend.invariant=true",
                                       "--set", "backend.mma_rows=32"});
  BOOST_TEST(r.rc == 1);
  BOOST_TEST(r.err == "<command line>: error: backend.mma_rows: has no effect in backend.test_ok with invariant: "
                      "true from the command line (remove it, or set invariant: false)\n1 error\n");
}

BOOST_AUTO_TEST_CASE(validate_checks_that_the_model_exists) {
  const std::string f = "tests/pipelines/good/minimal.yaml";
  run_result r = call(tandem::cli::run_validate, {f, "--set", "model=no-such-model"});
  BOOST_TEST(r.rc == 1);
  BOOST_TEST(has(r.err, "<command line>: error: model: unknown model 'no-such-model'"));
  BOOST_TEST(has(r.err, "smollm2-135m-instruct"));  // the known models are listed
  r = call(tandem::cli::run_validate, {f, "--set", "model=/nonexistent/m.gguf"});
  BOOST_TEST(r.rc == 1);
  BOOST_TEST(has(r.err, "model file '/nonexistent/m.gguf' not found"));
}

BOOST_AUTO_TEST_CASE(validate_usage_errors_exit_2) {
  BOOST_TEST(call(tandem::cli::run_validate, {}).rc == 2);
  BOOST_TEST(call(tandem::cli::run_validate, {"a.yaml", "b.yaml"}).rc == 2);
  BOOST_TEST(call(tandem::cli::run_validate, {"a.yaml", "--bogus"}).rc == 2);
  run_result h = call(tandem::cli::run_validate, {"--help"});
  BOOST_TEST(h.rc == 0);
  BOOST_TEST(has(h.out, "--set"));
}

BOOST_AUTO_TEST_CASE(plugins_lists_descriptors_probes_and_load_errors) {
  run_result r = call(tandem::cli::run_plugins, {});
  BOOST_TEST(r.rc == 1);  // the broken test plugins
  BOOST_TEST(has(r.out, "backend.test_ok  [backend]  runnable (score 5): always runs\n"));
  BOOST_TEST(has(r.out, "backend.test_probe0  [backend]  cannot run here: no test accelerator here"));
  BOOST_TEST(has(r.out, "    file: " + plugins_dir + "/scheduler.test_ok.so\n"));
  BOOST_TEST(has(r.out, "plugins that failed to load:\n"));
  BOOST_TEST(has(r.out, "scheduler.test_bad_version.so: built for plugin API version 999"));
  BOOST_TEST(has(r.out, "scheduler.test_bad_only_if.so: its schema is malformed: setting 'victims': only_if "
                        "'max_batch!=1,preempt=sometimes': preempt takes bool, not 'sometimes'\n"));
  BOOST_TEST(!has(r.out, "max_wait_ms"));
}

BOOST_AUTO_TEST_CASE(plugins_schema_prints_every_key_and_the_core_sections) {
  run_result r = call(tandem::cli::run_plugins, {"--schema"});
  BOOST_TEST(has(r.out, "    max_wait_ms: int in 0..600000 = 1500  [env TANDEM_TEST_MAX_WAIT_MS]\n"
                        "        how long a cold prompt waits\n"));
  BOOST_TEST(has(r.out, "    policy: string (fifo|lifo) = 'fifo'\n"));
  BOOST_TEST(has(r.out, "    k: int in 1..16 (required)\n"));
  BOOST_TEST(has(r.out, "    mma_rows: int in 0..64 = 16  [env TANDEM_TEST_MMA_ROWS]  [only if invariant=false, "
                        "q8=true]\n        rows on the mma kernel\n"));
  BOOST_TEST(has(r.out, "    retention_s: float in 0..10000000 = 300  [only if prefix_caching=true, retention=session]\n"));
  BOOST_TEST(has(r.out, "core sections:\nengine\n    max_model_len: int in 0..10000000 = 0\n"));
  BOOST_TEST(has(r.out, "    port: int in 1..65535 = 8080\n"));
  BOOST_TEST(has(r.out, "topology\n    ranks: int in 1..1024 = 1\n"));
}

BOOST_AUTO_TEST_SUITE_END()
