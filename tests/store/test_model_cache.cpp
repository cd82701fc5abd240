#define BOOST_TEST_MODULE store_model_cache
#include <boost/test/unit_test.hpp>

#include "store_fixture.hpp"
#include "tandem/error.hpp"

// The real default model, already in the user's cache: resolve_model must find it by
// name through the shipped manifest and verify it against the pinned sha256 and size.
using namespace tandem;
namespace fs = std::filesystem;

BOOST_AUTO_TEST_CASE(default_model_resolves_from_the_cache_and_verifies) {
  // TANDEM_TEST_MODEL may point at a cache elsewhere; <cache>/models/<name>/<file> says where.
  std::optional<tandem::test::env_var> cache;
  if (const char* t = std::getenv("TANDEM_TEST_MODEL"); t && *t) {
    cache.emplace("TANDEM_CACHE", fs::path(t).parent_path().parent_path().parent_path().string());
  }
  const auto m = find_manifest(default_model_name);
  BOOST_REQUIRE(m.has_value());
  std::vector<std::string> log;
  const fs::path p = resolve_model(default_model_name, /*allow_pull=*/false,
                                   [&](std::string_view s) { log.emplace_back(s); });
  BOOST_TEST(p == cached_path(*m));
  BOOST_TEST(fs::file_size(p) == m->file_size);
  // Whether hashed now or earlier (the stamp), the stamp now vouches for this exact file.
  BOOST_TEST(fs::exists(p.string() + ".verified"));
  if (log.empty()) BOOST_TEST_MESSAGE("cache hit via the .verified stamp");
  BOOST_TEST(sha256_file(p) == m->file_sha256);
}
