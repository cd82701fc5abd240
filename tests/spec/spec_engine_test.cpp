#define BOOST_TEST_MODULE spec_engine
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <set>

#include "spec_run.hpp"
#include "tandem/runtime.hpp"

// Speculative decoding in the engine, on the default model (backend.cpu) and the tiny
// GLM-5-family model: greedy outputs with drafter.ngram / drafter.suffix are token-identical
// to no drafter (several prompts, a repetitive one whose drafts must be accepted, through
// prefix caching, a KV pool small enough to preempt, continuous batching, stop tokens and
// max_tokens inside accepted runs); the pool's bookkeeping is checked after every step; at
// T > 0 a request's tokens equal plain sampling's with the same seed, and over many seeds
// the distributions of the first tokens agree (chi-square); `speculative: false` drafts
// nothing. With the adaptive draft length on (the default), outputs are the same.

using namespace tandem;

namespace {

using spec_test::chat;
using spec_test::job;
using spec_test::outcome;
using spec_test::run;
using spec_test::run_result;
using spec_test::source_root;

std::vector<job> default_model_jobs() { return spec_test::default_model_jobs(64); }

void expect_identical(const run_result& a, const run_result& b) {
  BOOST_REQUIRE(a.outputs.size() == b.outputs.size());
  for (size_t k = 0; k < a.outputs.size(); ++k)
    BOOST_TEST_CONTEXT("job " << k) {
      BOOST_TEST(a.outputs[k].tokens == b.outputs[k].tokens, boost::test_tools::per_element());
      BOOST_TEST(static_cast<int>(a.outputs[k].why) == static_cast<int>(b.outputs[k].why));
    }
}

// Drafts accepted at all, and accepted per position never more often than the one before.
void expect_acceptance(const engine_stats& s) {
  BOOST_TEST(s.spec_drafts > 0u);
  BOOST_TEST(s.spec_accepted_tokens > 0u);
  BOOST_TEST(s.spec_accepted_tokens <= s.spec_draft_tokens);
  uint64_t sum = 0;
  for (size_t i = 0; i < s.spec_accepted_per_pos.size(); ++i) {
    sum += s.spec_accepted_per_pos[i];
    if (i > 0) BOOST_TEST(s.spec_accepted_per_pos[i] <= s.spec_accepted_per_pos[i - 1]);
  }
  BOOST_TEST(sum == s.spec_accepted_tokens);
  BOOST_TEST_MESSAGE("drafts " << s.spec_drafts << ", accepted " << s.spec_accepted_tokens << " of "
                               << s.spec_draft_tokens << ", mean acceptance length "
                               << 1.0 + static_cast<double>(s.spec_accepted_tokens) / static_cast<double>(s.spec_drafts));
}

// Drafting every step (no adaptive length): these tests are about verification, so every
// decode step must carry a draft whatever the measured costs say.
const std::vector<std::string> cpu = {"backend.plugin=cpu", "drafter.adaptive=false"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

}  // namespace

BOOST_AUTO_TEST_CASE(greedy_with_each_drafter_equals_no_drafter) {
  const std::vector<job> jobs = default_model_jobs();
  const run_result plain = run("cpu.yaml", {}, jobs);
  BOOST_TEST(plain.stats.spec_drafts == 0u);
  const run_result ngram = run("spec-ngram.yaml", cpu, jobs);
  const run_result suffix = run("spec-suffix.yaml", cpu, jobs);
  expect_identical(plain, ngram);
  expect_identical(plain, suffix);
  expect_acceptance(ngram.stats);
  expect_acceptance(suffix.stats);
  // Fewer target forwards for the same tokens.
  BOOST_TEST(ngram.stats.steps < plain.stats.steps);
  BOOST_TEST(suffix.stats.steps < plain.stats.steps);
  // The adaptive length (the pipelines' default) drafts as measured costs say, and changes
  // nothing else.
  expect_identical(plain, run("spec-ngram.yaml", {"backend.plugin=cpu"}, jobs));
  expect_identical(plain, run("spec-suffix.yaml", {"backend.plugin=cpu"}, jobs));
}

BOOST_AUTO_TEST_CASE(greedy_identical_with_prefix_caching_and_preemption) {
  // The same prompt three times (cache hits on the second and third), in a pool of 12 pages
  // of 16 tokens that three 64-token answers cannot share: preemption and recompute.
  std::vector<job> jobs;
  const std::vector<int32_t> count = chat("Count from 1 to 200, separated by commas.");
  for (int i = 0; i < 3; ++i) jobs.push_back({count, i * 2, 96, {}, 0, {}});
  jobs.push_back({chat("Write the alphabet in capital letters, with spaces between the letters."), 1, 96, {}, 0, {}});
  const std::vector<std::string> small = {"engine.kv_tokens=192", "engine.page_size=16", "engine.prefix_caching=true"};
  const run_result plain = run("cpu.yaml", small, jobs);
  const run_result ngram = run("spec-ngram.yaml", with(cpu, small), jobs);
  const run_result suffix = run("spec-suffix.yaml", with(cpu, small), jobs);
  BOOST_TEST(plain.stats.preemptions > 0u);
  BOOST_TEST(ngram.stats.preemptions > 0u);
  BOOST_TEST(ngram.stats.prefix_hits > 0u);
  expect_identical(plain, ngram);
  expect_identical(plain, suffix);
  expect_acceptance(ngram.stats);
}

BOOST_AUTO_TEST_CASE(stop_tokens_and_max_tokens_inside_an_accepted_run) {
  const std::vector<int32_t> count = chat("Count from 1 to 200, separated by commas.");
  const run_result probe = run("cpu.yaml", {}, {{count, 0, 60, {}, 0, {}}});
  BOOST_REQUIRE(probe.outputs[0].tokens.size() == 60u);
  // A stop token that first appears well into the answer, and odd lengths.
  const int32_t stop = probe.outputs[0].tokens[40];
  std::vector<job> jobs = {{count, 0, 60, {}, 0, {stop}}, {count, 0, 37, {}, 0, {}}, {count, 0, 1, {}, 0, {}},
                           {count, 0, 2, {}, 0, {}}};
  const run_result plain = run("cpu.yaml", {}, jobs);
  const run_result ngram = run("spec-ngram.yaml", cpu, jobs);
  const run_result suffix = run("spec-suffix.yaml", cpu, jobs);
  BOOST_TEST(static_cast<int>(plain.outputs[0].why) == static_cast<int>(finish_reason::stop));
  BOOST_TEST(plain.outputs[0].tokens.back() == stop);
  BOOST_TEST(plain.outputs[1].tokens.size() == 37u);
  expect_identical(plain, ngram);
  expect_identical(plain, suffix);
  expect_acceptance(ngram.stats);
}

BOOST_AUTO_TEST_CASE(the_per_request_switch_turns_drafting_off) {
  job j{chat("Count from 1 to 200, separated by commas."), 0, 48, {}, 0, {}};
  j.sampling.speculative = false;
  const run_result off = run("spec-ngram.yaml", cpu, {j});
  BOOST_TEST(off.stats.spec_drafts == 0u);
  BOOST_TEST(off.stats.spec_draft_tokens == 0u);
  // disable_above_batch: four requests in a step, the drafter's limit is 3.
  std::vector<job> four(4, job{chat("Count from 1 to 200, separated by commas."), 0, 24, {}, 0, {}});
  const run_result crowded = run("spec-ngram.yaml", with(cpu, {"drafter.disable_above_batch=3"}), four);
  BOOST_TEST(crowded.stats.spec_drafts == 0u);
}

BOOST_AUTO_TEST_CASE(sampling_with_a_seed_gives_plain_sampling_tokens) {
  // At T > 0 row r is drawn as plain decoding draws token g + r (same seed and step), so
  // with equal logits the tokens are equal, penalties (host sampling) included.
  std::vector<job> jobs;
  const std::vector<int32_t> count = chat("Count from 1 to 200, separated by commas.");
  for (int i = 0; i < 4; ++i) {
    job j{count, 0, 40, {}, i == 3 ? 0.3f : 0.0f, {}};
    j.sampling.temperature = 0.7f;
    j.sampling.top_p = i == 1 ? 0.9f : 1.0f;
    j.sampling.top_k = i == 2 ? 20 : 0;
    j.sampling.seed = 1000 + static_cast<uint64_t>(i);
    jobs.push_back(j);
  }
  const run_result plain = run("cpu.yaml", {}, jobs);
  const run_result ngram = run("spec-ngram.yaml", cpu, jobs);
  expect_identical(plain, ngram);
  expect_acceptance(ngram.stats);
  BOOST_TEST(ngram.stats.spec_accepted_tokens < ngram.stats.spec_draft_tokens);  // rejections too
}

// Two-sample chi-square tests, one per position of the first six tokens: spec sampling
// over seeds 0..N-1 against plain sampling over seeds N..2N-1 (disjoint, so the test compares
// distributions, not replays). Tokens with fewer than 5 expected samples are pooled; the six
// tests together at a 0.1% false-alarm rate (Bonferroni: each at 0.1% / 6). Deterministic (fixed seeds).
BOOST_AUTO_TEST_CASE(sampled_distribution_matches_plain_sampling) {
  // A prompt whose continuation is uncertain but repetitive enough for drafts: the
  // drafter's guesses are accepted sometimes and rejected sometimes.
  const std::vector<int32_t> prompt = chat("Repeat after me, with small changes: red blue red blue red green red blue");
  constexpr int n = 240, positions = 6;
  auto jobs_from = [&](uint64_t seed0) {
    std::vector<job> jobs;
    for (int i = 0; i < n; ++i) {
      job j{prompt, i / 16, positions, {}, 0, {}};
      j.sampling.temperature = 0.8f;
      j.sampling.top_k = 8;
      j.sampling.seed = seed0 + static_cast<uint64_t>(i);
      jobs.push_back(j);
    }
    return jobs;
  };
  const run_result plain = run("cpu.yaml", {"scheduler.max_batch=16"}, jobs_from(n));
  const run_result spec = run("spec-ngram.yaml", with(cpu, {"scheduler.max_batch=16", "drafter.k=2"}), jobs_from(0));
  BOOST_TEST(spec.stats.spec_accepted_tokens > 0u);
  BOOST_TEST(spec.stats.spec_accepted_tokens < spec.stats.spec_draft_tokens);
  for (size_t pos = 0; pos < static_cast<size_t>(positions); ++pos) {
    std::map<int32_t, std::pair<double, double>> table;  // token -> (plain, spec) counts
    for (int i = 0; i < n; ++i) {
      BOOST_REQUIRE(plain.outputs[i].tokens.size() == static_cast<size_t>(positions));
      BOOST_REQUIRE(spec.outputs[i].tokens.size() == static_cast<size_t>(positions));
      table[plain.outputs[i].tokens[pos]].first += 1;
      table[spec.outputs[i].tokens[pos]].second += 1;
    }
    std::vector<std::pair<double, double>> cats;
    std::pair<double, double> rare{0, 0};
    for (const auto& [tok, c] : table) {
      if ((c.first + c.second) / 2 < 5) rare.first += c.first, rare.second += c.second;
      else cats.push_back(c);
    }
    if (rare.first + rare.second > 0) cats.push_back(rare);
    double chi2 = 0;
    for (auto [a, b] : cats) {
      const double e = (a + b) / 2;
      chi2 += (a - e) * (a - e) / e + (b - e) * (b - e) / e;
    }
    const int dof = static_cast<int>(cats.size()) - 1;
    BOOST_TEST_MESSAGE("position " << pos << ": chi-square " << chi2 << " over " << cats.size() << " categories");
    if (dof < 1) {  // one token only: both samples must agree on it
      BOOST_TEST(table.size() == 1u);
      continue;
    }
    // The 1 - 0.001/6 quantile of chi-square with dof degrees of freedom (Wilson-Hilferty;
    // z is the normal quantile at 1 - 1.67e-4).
    const double z = 3.59, h = 2.0 / (9.0 * dof);
    const double limit = dof * std::pow(1 - h + z * std::sqrt(h), 3);
    BOOST_TEST(chi2 < limit, "position " << pos << ": chi-square " << chi2 << " >= " << limit);
  }
  BOOST_TEST_MESSAGE(spec.stats.spec_accepted_tokens << " of " << spec.stats.spec_draft_tokens
                                                     << " draft tokens accepted");
}

BOOST_AUTO_TEST_CASE(glm_greedy_with_each_drafter_equals_no_drafter) {
  std::filesystem::current_path(source_root());  // the pipeline names its model relative to the repository
  // Token ids below 500 (the tiny model's vocabulary); a repeating pattern so drafts appear.
  std::vector<job> jobs;
  for (int i = 0; i < 3; ++i) {
    job j;
    for (int r = 0; r < 6; ++r)
      for (int32_t t = 0; t < 7; ++t) j.prompt.push_back(10 + 37 * i + t * 3);
    j.at_step = i;
    j.max_new = 32;
    jobs.push_back(j);
  }
  const std::vector<std::string> glm_ngram = {"drafter.plugin=drafter.ngram", "drafter.k=4", "drafter.adaptive=false"};
  const std::vector<std::string> glm_suffix = {"drafter.plugin=drafter.suffix", "drafter.adaptive=false"};
  const run_result plain = run("safetensors.yaml", {}, jobs);
  const run_result ngram = run("safetensors.yaml", glm_ngram, jobs);
  const run_result suffix = run("safetensors.yaml", glm_suffix, jobs);
  expect_identical(plain, ngram);
  expect_identical(plain, suffix);
  BOOST_TEST(ngram.stats.spec_drafts > 0u);
  BOOST_TEST(suffix.stats.spec_drafts > 0u);
}
