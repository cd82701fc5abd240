#define BOOST_TEST_MODULE store_resolve
#include <boost/test/unit_test.hpp>

#include "store_fixture.hpp"
#include "tandem/error.hpp"

using namespace tandem;
using tandem::test::env_var;
using tandem::test::store_fixture;
using tandem::test::write_text;
namespace fs = std::filesystem;

namespace {

std::string resolve_error(std::string_view model, bool allow_pull, const pull_options& opt = {}) {
  try {
    resolve_model(model, allow_pull, {}, opt);
  } catch (const model_error& e) {
    return e.what();
  }
  BOOST_FAIL("resolve_model accepted " << model);
  return {};
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(an_existing_path_is_itself, store_fixture) {
  const fs::path file = root / "local.gguf";
  write_text(file, "GGUF");
  BOOST_TEST(resolve_model(file.string(), false) == file);
  BOOST_TEST(resolve_error((root / "missing.gguf").string(), true).find("no such model file") !=
             std::string::npos);
  BOOST_TEST(resolve_error(root.string(), true).find("not a regular file") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(an_unknown_name_lists_the_known_ones, store_fixture) {
  const std::string msg = resolve_error("no-such-model", true);
  BOOST_TEST(msg.find("no-such-model") != msg.npos, msg);
  BOOST_TEST(msg.find("known models:") != msg.npos, msg);
  BOOST_TEST(msg.find(std::string(default_model_name)) != msg.npos, msg);
  BOOST_TEST(resolve_error("", true).find("no model given") != std::string::npos);
}

BOOST_FIXTURE_TEST_CASE(a_name_resolves_to_the_cache_and_pulls_when_allowed, store_fixture) {
  write_text(root / "models/fake-model.yaml", manifest_yaml());
  env_var dirs("TANDEM_MODELS_DIR", (root / "models").string());
  const std::string msg = resolve_error("fake-model", false, offline());
  BOOST_TEST(msg.find("tandem pull fake-model") != msg.npos, msg);
  BOOST_TEST(!fs::exists(cached_path(manifest)));

  const fs::path p = resolve_model("fake-model", true, {}, offline());
  BOOST_TEST(p == cached_path(manifest));
  BOOST_TEST(sha256_file(p) == manifest.file_sha256);
  BOOST_TEST(resolve_model("fake-model", false) == p);  // now cached: no pull needed
}
