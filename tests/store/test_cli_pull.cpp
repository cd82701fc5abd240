#define BOOST_TEST_MODULE store_cli_pull
#include <boost/test/unit_test.hpp>

#include <iostream>
#include <sstream>

#include "commands.hpp"
#include "store_fixture.hpp"

using tandem::test::env_var;
using tandem::test::store_fixture;
using tandem::test::write_text;
namespace fs = std::filesystem;

namespace {

// Runs `tandem pull ARGS` in-process, capturing what it writes to stdout and stderr.
struct cli_result {
  int status;
  std::string out, err;
};

cli_result run(const tandem::cli::args& a) {
  std::ostringstream out, err;
  auto* old_out = std::cout.rdbuf(out.rdbuf());
  auto* old_err = std::cerr.rdbuf(err.rdbuf());
  int status = -1;
  try {
    status = tandem::cli::run_pull(a);
  } catch (...) {
    std::cout.rdbuf(old_out);
    std::cerr.rdbuf(old_err);
    throw;
  }
  std::cout.rdbuf(old_out);
  std::cerr.rdbuf(old_err);
  return {status, out.str(), err.str()};
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(pull_prints_progress_to_stderr_and_the_path_to_stdout, store_fixture) {
  write_text(root / "models/fake-model.yaml", manifest_yaml());
  env_var dirs("TANDEM_MODELS_DIR", (root / "models").string());
  const cli_result r = run({"fake-model", "--pip-arg=--no-index", "--pip-arg=--isolated",
                            "--pip-arg=--find-links=" + index.string()});
  BOOST_TEST(r.status == 0, r.err);
  BOOST_TEST(r.out == cached_path(manifest).string() + "\n");
  BOOST_TEST(r.err.find("downloading tandem-fake-model==0.1.0") != std::string::npos, r.err);

  const cli_result again = run({"fake-model", "--python", (root / "no-python").string()});
  BOOST_TEST(again.status == 0, again.err);  // cache hit: pip never runs
  BOOST_TEST(again.out == r.out);

  const cli_result forced =
      run({"fake-model", "--force", "--python", (root / "no-python").string()});
  BOOST_TEST(forced.status == 1);
  BOOST_TEST(forced.err.find("tandem pull: error: cannot run") != std::string::npos, forced.err);
}

BOOST_AUTO_TEST_CASE(usage_errors_and_unknown_models) {
  BOOST_TEST(run({"--no-such-flag"}).status == 2);
  BOOST_TEST(run({"a", "b"}).status == 2);
  const cli_result unknown = run({"no-such-model"});
  BOOST_TEST(unknown.status == 1);
  BOOST_TEST(unknown.err.find("known models:") != std::string::npos, unknown.err);
  BOOST_TEST(unknown.err.find("smollm2-135m-instruct") != std::string::npos, unknown.err);
  const cli_result list = run({"--list"});
  BOOST_TEST(list.status == 0);
  BOOST_TEST(list.out.find("smollm2-135m-instruct\n") != std::string::npos, list.out);
  BOOST_TEST(run({"--help"}).out.find("--force") != std::string::npos);
}
