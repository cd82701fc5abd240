#define BOOST_TEST_MODULE spec_recorded
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <set>
#include <string>

#include <unistd.h>

#include "spec_run.hpp"
#include "../test_model_file.hpp"

// Steps a GPU backend records (CUDA graphs) while a drafter runs, on the default model:
// backend.record_check (tests/spec/record_check, built beside this test) is backend.cpu posing as a GPU, so the
// model pads decode steps and records them, records small verify steps at their own shape
// and copies the drafter's hidden-state taps inside them; the plugin fails any replay whose
// ops or buffers differ from the recorded step's. Greedy output through it equals
// backend.cpu's, with no drafter, with drafter.ngram and with the trained drafter.dflash2,
// and verify steps were replayed; so does the tiny glm_moe_dsa fixture's (its recorded
// decode steps). 77 without the model file.

namespace fs = std::filesystem;
using spec_test::run;
using spec_test::run_result;

namespace {

struct replay_counts {
  size_t records = 0, replays = 0, verify_replays = 0;
};

// The log's keys: token rows in bits 0-11, the most rows of one sequence in 12-16,
// sequences in 17-24 (llama_model.cpp).
replay_counts read_log(const fs::path& log) {
  replay_counts c;
  std::ifstream in(log);
  std::string what;
  unsigned long long key = 0;
  size_t ops = 0;
  while (in >> what >> key >> ops) {
    const unsigned long long rows = key & 0xfff, seqs = (key >> 17) & 0xff;
    if (what == "record") ++c.records;
    if (what == "replay") ++c.replays, c.verify_replays += rows > seqs ? 1 : 0;
  }
  return c;
}

run_result run_checked(const std::string& pipeline, std::vector<std::string> overrides, const fs::path& log,
                       replay_counts& counts, const std::vector<spec_test::job>& jobs = spec_test::default_model_jobs(48)) {
  fs::remove(log);
  overrides.push_back("backend.plugin=backend.record_check");
  run_result r = run(pipeline, overrides, jobs);
  counts = read_log(log);
  BOOST_TEST_MESSAGE(pipeline << ": " << counts.records << " steps recorded, " << counts.replays
                              << " replayed (of them verify steps, by llama's key layout: " << counts.verify_replays
                              << ")");
  return r;
}

void expect_identical(const run_result& plain, const run_result& checked) {
  BOOST_REQUIRE(plain.outputs.size() == checked.outputs.size());
  for (size_t k = 0; k < plain.outputs.size(); ++k)
    BOOST_TEST_CONTEXT("prompt " << k) {
      BOOST_TEST(plain.outputs[k].tokens == checked.outputs[k].tokens, boost::test_tools::per_element());
      BOOST_TEST((plain.outputs[k].why == checked.outputs[k].why));  // a failed replay ends it early
    }
}

}  // namespace

BOOST_AUTO_TEST_CASE(recorded_steps_replay_and_match_backend_cpu) {
  const fs::path log = fs::temp_directory_path() / ("tandem_record_check_" + std::to_string(::getpid()) + ".log");
  ::setenv("TANDEM_RECORD_CHECK_LOG", log.c_str(), 1);
  const run_result plain = run("cpu.yaml", {}, spec_test::default_model_jobs(48));

  replay_counts c;
  expect_identical(plain, run_checked("cpu.yaml", {}, log, c));
  BOOST_TEST(c.replays > 0u);

  expect_identical(plain, run_checked("spec-ngram.yaml", {"drafter.adaptive=false"}, log, c));
  BOOST_TEST(c.verify_replays > 0u);

  const fs::path trained = spec_test::source_root() / "drafters" / "smollm2-135m-instruct-dflash2";
  const run_result drafted =
      run_checked("spec-dflash2.yaml", {"drafter.weights=" + trained.string(), "drafter.adaptive=false"}, log, c);
  expect_identical(plain, drafted);
  BOOST_TEST(drafted.stats.spec_accepted_tokens > 0u);
  BOOST_TEST(c.verify_replays > 0u);
  fs::remove(log);
}

BOOST_AUTO_TEST_CASE(glm_recorded_decode_steps_replay_and_match_backend_cpu) {
  // The tiny glm_moe_dsa fixture (MLA, DSA past 8 tokens, MoE): its decode steps are padded
  // and recorded too (the first run of a shape eagerly, then recorded, then replayed).
  const fs::path log = fs::temp_directory_path() / ("tandem_record_check_glm_" + std::to_string(::getpid()) + ".log");
  ::setenv("TANDEM_RECORD_CHECK_LOG", log.c_str(), 1);
  std::vector<spec_test::job> jobs;
  for (int k = 0; k < 4; ++k) {
    std::vector<int32_t> prompt;
    for (int t = 0; t < 12 + 5 * k; ++t) prompt.push_back((37 * t + 11 * k + 3) % 512);
    jobs.push_back({prompt, 2 * k, 24, {}, 0, {}});
  }
  const std::string model = "model=" + (spec_test::source_root() / "tests/fixtures/glm_moe_dsa/tiny").string();
  const run_result plain = run("safetensors.yaml", {model}, jobs);
  replay_counts c;
  expect_identical(plain, run_checked("safetensors.yaml", {model}, log, c, jobs));
  BOOST_TEST(c.replays > 0u);
  fs::remove(log);
}

int main(int argc, char* argv[]) {
  if (!tandem::test::test_model_file()) return 77;
  // The plugin is built beside this test; the other plugins where they always are.
  const fs::path here = fs::canonical("/proc/self/exe").parent_path();
  const char* old = std::getenv("TANDEM_PLUGIN_PATH");
  const std::string path = here.string() + (old ? std::string(":") + old : "");
  ::setenv("TANDEM_PLUGIN_PATH", path.c_str(), 1);
  return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
