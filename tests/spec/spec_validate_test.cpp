#define BOOST_TEST_MODULE spec_validate
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "tandem/pipeline.hpp"
#include "tandem/plugin_host.hpp"

// A drafter: section that cannot run is an error at validate, never dropped: unknown
// drafters, settings out of range or unknown, settings that contradict each other (checked by
// making the drafter; drafter.dflash2's against its weight directory). The shipped spec
// pipelines validate clean and name their drafter (spec-dflash2.yaml with its weights
// pointed at the tiny fixture, since the trained ones may not be there).

using namespace tandem;
namespace fs = std::filesystem;

namespace {

fs::path source_root() {
  const char* r = std::getenv("TANDEM_SOURCE_ROOT");
  return r ? r : ".";
}

plugin_host& host() {
  static plugin_host h(plugin_host::default_search_path());
  return h;
}

// default.yaml with `drafter_line` appended, validated.
pipeline_result validate_with(const std::string& drafter_line) {
  std::ifstream in(source_root() / "pipelines" / "default.yaml");
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const fs::path file = fs::temp_directory_path() / ("spec_validate_" + std::to_string(::getpid()) + ".yaml");
  std::ofstream(file) << text << drafter_line << "\n";
  pipeline_result r = load_pipeline(file, host(), {}, [](const std::string&) { return std::nullopt; });
  fs::remove(file);
  return r;
}

bool has_error(const pipeline_result& r, const std::string& key, const std::string& words) {
  for (const diagnostic& d : r.errors)
    if (d.key_path == key && (d.message + " " + d.hint).find(words) != std::string::npos) return true;
  return false;
}

std::string all(const pipeline_result& r) {
  std::string s;
  for (const diagnostic& d : r.errors) s += d.str() + "\n";
  return s;
}

}  // namespace

BOOST_AUTO_TEST_CASE(the_spec_pipelines_validate_and_name_their_drafter) {
  for (const auto& [file, name] : {std::pair{"spec-ngram.yaml", "drafter.ngram"}, {"spec-suffix.yaml", "drafter.suffix"}}) {
    pipeline_result r = load_pipeline(source_root() / "pipelines" / file, host(), {},
                                      [](const std::string&) { return std::nullopt; });
    BOOST_TEST_CONTEXT(file) {
      BOOST_TEST(r.errors.empty(), all(r));
      BOOST_REQUIRE(r.spec.has_value());
      BOOST_REQUIRE(r.spec->drafter.has_value());
      BOOST_TEST(r.spec->drafter->name == name);
    }
  }
}

BOOST_AUTO_TEST_CASE(an_unknown_drafter_is_an_error) {
  const pipeline_result r = validate_with("drafter: { plugin: drafter.medusa }");
  BOOST_TEST(!r.spec.has_value());
  BOOST_TEST(has_error(r, "drafter.plugin", "unknown plugin 'drafter.medusa'"), all(r));
  const pipeline_result short_name = validate_with("drafter: { plugin: ngarm }");
  BOOST_TEST(has_error(short_name, "drafter.plugin", "did you mean 'ngram'"), all(short_name));
  const pipeline_result wrong = validate_with("drafter: { plugin: scheduler.fcfs }");
  BOOST_TEST(has_error(wrong, "drafter.plugin", "is a scheduler plugin"), all(wrong));
}

BOOST_AUTO_TEST_CASE(bad_drafter_settings_are_errors) {
  BOOST_TEST(has_error(validate_with("drafter: { plugin: drafter.ngram, k: 0 }"), "drafter.k", ""));
  BOOST_TEST(has_error(validate_with("drafter: { plugin: drafter.ngram, num_tokens: 3 }"), "drafter.num_tokens",
                       "unknown setting"));
  const pipeline_result crossed = validate_with("drafter: { plugin: drafter.ngram, min_n: 5, max_n: 2 }");
  BOOST_TEST(has_error(crossed, "drafter.min_n", "must not exceed max_n"), all(crossed));
  BOOST_TEST(has_error(validate_with("drafter: { plugin: drafter.suffix, min_token_prob: 1.5 }"),
                       "drafter.min_token_prob", ""));
  BOOST_TEST(has_error(validate_with("drafter: { plugin: drafter.suffix, max_cached_tokens: -1 }"),
                       "drafter.max_cached_tokens", ""));
  BOOST_TEST(validate_with("drafter: { plugin: drafter.suffix, k: 8, max_depth: 16 }").errors.empty());
  // The adaptive draft length's switch is a boolean of both drafters.
  for (const char* d : {"drafter.ngram", "drafter.suffix"}) {
    BOOST_TEST_CONTEXT(d) {
      const pipeline_result bad = validate_with(std::string("drafter: { plugin: ") + d + ", adaptive: sometimes }");
      BOOST_TEST(has_error(bad, "drafter.adaptive", ""), all(bad));
      const pipeline_result off = validate_with(std::string("drafter: { plugin: ") + d + ", adaptive: false }");
      BOOST_TEST(off.errors.empty(), all(off));
      BOOST_REQUIRE(off.spec.has_value());
      BOOST_TEST(!off.spec->drafter->cfg.get_bool("adaptive"));
    }
  }
}

BOOST_AUTO_TEST_CASE(the_dflash2_pipeline_validates_against_its_weight_directory) {
  const std::string tiny = (source_root() / "tests" / "spec" / "fixtures" / "dflash2_tiny").string();
  const auto loader = [](const std::string&) { return std::nullopt; };
  // The fixture's blocks hold 6 positions: k at most 5.
  const std::vector<std::string> fixture_k5 = {"drafter.weights=" + tiny, "drafter.k=5"};
  const std::vector<std::string> fixture = {"drafter.weights=" + tiny};
  pipeline_result r = load_pipeline(source_root() / "pipelines" / "spec-dflash2.yaml", host(), fixture_k5, loader);
  BOOST_TEST(r.errors.empty(), all(r));
  BOOST_REQUIRE(r.spec.has_value());
  BOOST_REQUIRE(r.spec->drafter.has_value());
  BOOST_TEST(r.spec->drafter->name == "drafter.dflash2");
  BOOST_TEST(r.spec->backend.name == "backend.cpu");
  r = load_pipeline(source_root() / "pipelines" / "spec-dflash2.yaml", host(), fixture, loader);
  BOOST_TEST(has_error(r, "drafter.k", "drafts at most 5"), all(r));
  const pipeline_result missing = validate_with("drafter: { plugin: drafter.dflash2, weights: /nonexistent/dflash2 }");
  BOOST_TEST(has_error(missing, "drafter.weights", "is not a directory"), all(missing));
  const pipeline_result unset = validate_with("drafter: { plugin: drafter.dflash2 }");
  BOOST_TEST(has_error(unset, "drafter.weights", ""), all(unset));
  const pipeline_result unknown =
      validate_with("drafter: { plugin: drafter.dflash2, weights: " + tiny + ", block_size: 4 }");
  BOOST_TEST(has_error(unknown, "drafter.block_size", "unknown setting"), all(unknown));
}
