#define BOOST_TEST_MODULE store_sha256
#include <boost/test/unit_test.hpp>

#include "store_fixture.hpp"
#include "tandem/error.hpp"

using namespace tandem;
using tandem::test::temp_dir;
using tandem::test::write_text;
namespace fs = std::filesystem;


// FIPS 180-2 test vectors.
BOOST_FIXTURE_TEST_CASE(known_vectors, temp_dir) {
  write_text(path / "empty", "");
  write_text(path / "abc", "abc");
  BOOST_TEST(sha256_file(path / "empty") ==
             "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  BOOST_TEST(sha256_file(path / "abc") ==
             "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
}

// A million 'a's spans several read chunks, so progress goes 0% .. 100% in steps.
BOOST_FIXTURE_TEST_CASE(multi_chunk_file_and_progress, temp_dir) {
  write_text(path / "a", std::string(1000000, 'a'));
  write_text(path / "big", std::string(5 << 20, 'x'));
  BOOST_TEST(sha256_file(path / "a") ==
             "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
  std::vector<std::string> log;
  sha256_file(path / "big", [&](std::string_view s) { log.emplace_back(s); });
  BOOST_REQUIRE(log.size() >= 3);
  BOOST_TEST(log.front() == "verifying sha256 of big ... 0%");
  BOOST_TEST(log.back() == "verifying sha256 of big ... 100%");
  BOOST_TEST(log[1] == "verifying sha256 of big ... 20%");
}

BOOST_AUTO_TEST_CASE(missing_file_is_a_model_error) {
  BOOST_CHECK_THROW(sha256_file("/no/such/file.gguf"), model_error);
}

BOOST_FIXTURE_TEST_CASE(cache_dir_follows_the_environment, temp_dir) {
  {
    tandem::test::env_var c("TANDEM_CACHE", (path / "c").string());
    BOOST_TEST(cache_dir() == path / "c");
  }
  tandem::test::env_var c("TANDEM_CACHE", "");
  {
    tandem::test::env_var x("XDG_CACHE_HOME", (path / "x").string());
    BOOST_TEST(cache_dir() == path / "x/tandem");
  }
  tandem::test::env_var x("XDG_CACHE_HOME", "");
  tandem::test::env_var h("HOME", (path / "h").string());
  BOOST_TEST(cache_dir() == path / "h/.cache/tandem");
}
