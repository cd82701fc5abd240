#define BOOST_TEST_MODULE spec_dflash2_engine
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cstdio>

#include "dflash2_test_util.hpp"
#include "spec_run.hpp"
#include "tandem/runtime.hpp"
#include "../test_model_file.hpp"

// drafter.dflash2 in the engine on the default model (backend.cpu): greedy output with the
// drafter equals no drafter, token for token (several prompts x 64 tokens, continuous
// batching, a draft every step). spec_dflash2_engine runs it with random default-shaped
// weights (bf16, written to a temporary directory: the drafts are rejected, but bind,
// observe and propose run on every step) and times propose(); spec_dflash2_trained runs it
// with drafters/smollm2-135m-instruct-dflash2 and expects accepted drafts (77 without
// those weights). Both 77 without the model file.

using namespace dflash2_test;

namespace {

using spec_test::run;
using spec_test::run_result;
using spec_test::source_root;

fs::path trained_dir() { return source_root() / "drafters" / "smollm2-135m-instruct-dflash2"; }

std::vector<spec_test::job> jobs() { return spec_test::default_model_jobs(64); }

void expect_identical(const run_result& plain, const run_result& drafted) {
  BOOST_REQUIRE(plain.outputs.size() == drafted.outputs.size());
  for (size_t k = 0; k < plain.outputs.size(); ++k)
    BOOST_TEST_CONTEXT("prompt " << k) {
      BOOST_TEST(plain.outputs[k].tokens.size() == 64u);
      BOOST_TEST(plain.outputs[k].tokens == drafted.outputs[k].tokens, boost::test_tools::per_element());
    }
  BOOST_TEST_MESSAGE("drafts " << drafted.stats.spec_drafts << ", accepted " << drafted.stats.spec_accepted_tokens
                               << " of " << drafted.stats.spec_draft_tokens << " draft tokens; " << drafted.stats.steps
                               << " steps against " << plain.stats.steps);
}

}  // namespace

#ifndef DFLASH2_TRAINED

BOOST_AUTO_TEST_CASE(greedy_with_a_random_dflash2_equals_no_drafter) {
  const fs::path dir = temp_dir("engine");
  write_drafter(dir, default_config(), {.bf16 = true, .shards = 2, .drop_tensor = {}, .seed = 5});
  const std::vector<spec_test::job> j = jobs();
  const run_result plain = run("cpu.yaml", {}, j);
  const run_result drafted = run("spec-dflash2.yaml", {"drafter.weights=" + dir.string(), "drafter.adaptive=false"}, j);
  BOOST_TEST(drafted.stats.spec_drafts > 0u);  // proposals were made (from observed context)
  expect_identical(plain, drafted);
  fs::remove_all(dir);
}

// What one propose() costs on this machine with the default-shaped drafter (f32 target
// table and head of 49152 x 576, random), at a short and a full context window.
BOOST_AUTO_TEST_CASE(propose_cost) {
  const dflash2_config c = default_config();
  const fs::path dir = temp_dir("cost");
  write_drafter(dir, c, {.bf16 = true, .shards = 1, .drop_tensor = {}, .seed = 9});
  const auto n = static_cast<size_t>(c.target.vocab_size * c.hidden_size);
  std::vector<float> table(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (float& x : table) x = normal(rng);
  const tensor_info t{"table", dtype::f32, {c.target.vocab_size, c.hidden_size}, table.data(), n * 4};
  cpu_target target(c, t, t);
  dflash2_drafter d(settings_for(dir, 7));
  d.bind(target.target);
  for (int64_t ctx : {int64_t(256), c.context_window}) {
    std::vector<float> tap(static_cast<size_t>(ctx * c.hidden_size));
    for (float& x : tap) x = normal(rng) * 20;
    const std::vector<tensor_view> taps(static_cast<size_t>(c.taps()),
                                        tensor_view::contiguous(tap.data(), dtype::f32, {ctx, c.hidden_size}));
    const uint64_t seq = static_cast<uint64_t>(ctx);
    auto t0 = std::chrono::steady_clock::now();
    d.observe(seq, 0, taps);
    const double observe_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::vector<int32_t> tokens(static_cast<size_t>(ctx) + 1, 100);
    const int reps = 10;
    t0 = std::chrono::steady_clock::now();
    for (int r = 0; r < reps; ++r) BOOST_TEST(d.propose(seq, {.tokens = tokens, .prompt_len = 1, .max_draft = 7}).size() == 7u);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count() / reps;
    BOOST_TEST_MESSAGE("context " << ctx << ": propose() of 7 tokens " << ms << " ms; observe() of " << ctx << " rows "
                                  << observe_ms << " ms");
  }
  fs::remove_all(dir);
}

// What a step's drafts cost for 8 sequences (context 256 each, two new decode rows each
// since the last draft): propose() for each against one propose_batch(); the same drafts.
BOOST_AUTO_TEST_CASE(propose_batch_cost) {
  const dflash2_config c = default_config();
  const fs::path dir = temp_dir("batch_cost");
  write_drafter(dir, c, {.bf16 = true, .shards = 1, .drop_tensor = {}, .seed = 9});
  const auto n = static_cast<size_t>(c.target.vocab_size * c.hidden_size);
  std::vector<float> table(n);
  std::mt19937 rng(3);
  std::normal_distribution<float> normal(0.0f, 0.05f);
  for (float& x : table) x = normal(rng);
  const tensor_info t{"table", dtype::f32, {c.target.vocab_size, c.hidden_size}, table.data(), n * 4};
  cpu_target one_target(c, t, t), batch_target(c, t, t);
  dflash2_drafter one(settings_for(dir, 7)), batched(settings_for(dir, 7));
  one.bind(one_target.target);
  batched.bind(batch_target.target);
  const int sequences = 8, steps = 5;
  const int64_t ctx = 256, rows = ctx + 2 * steps;
  std::vector<float> tap(static_cast<size_t>(rows * c.hidden_size));
  for (float& x : tap) x = normal(rng) * 20;
  const auto observe = [&](int64_t from, int64_t to) {
    const std::vector<tensor_view> taps(static_cast<size_t>(c.taps()),
                                        tensor_view::contiguous(tap.data() + from * c.hidden_size, dtype::f32,
                                                                {to - from, c.hidden_size}));
    for (uint64_t s = 0; s < sequences; ++s) one.observe(s, from, taps), batched.observe(s, from, taps);
  };
  observe(0, ctx);
  std::vector<std::vector<int32_t>> tokens(sequences);
  double one_ms = 0, batch_ms = 0;
  for (int step = 0; step < steps; ++step) {
    const int64_t len = ctx + 2 * step;
    if (step > 0) observe(len - 2, len);
    std::vector<draft_request> reqs;
    for (int s = 0; s < sequences; ++s) {
      tokens[static_cast<size_t>(s)].assign(static_cast<size_t>(len) + 1, 100 + s);
      reqs.push_back({static_cast<uint64_t>(s), {.tokens = tokens[static_cast<size_t>(s)], .prompt_len = 1, .max_draft = 7}});
    }
    auto t0 = std::chrono::steady_clock::now();
    std::vector<std::vector<int32_t>> each;
    for (const draft_request& r : reqs) each.push_back(one.propose(r.seq_id, r.ctx));
    one_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    t0 = std::chrono::steady_clock::now();
    const std::vector<std::vector<int32_t>> together = batched.propose_batch(reqs);
    batch_ms += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    BOOST_TEST((together == each));
  }
  BOOST_TEST_MESSAGE(sequences << " sequences, context " << ctx << ": propose() each " << one_ms / steps
                               << " ms a step, propose_batch() " << batch_ms / steps << " ms");
  fs::remove_all(dir);
}

#else

BOOST_AUTO_TEST_CASE(greedy_with_the_trained_dflash2_equals_no_drafter) {
  const std::vector<spec_test::job> j = jobs();
  const run_result plain = run("cpu.yaml", {}, j);
  const std::string w = "drafter.weights=" + trained_dir().string();
  const run_result every = run("spec-dflash2.yaml", {w, "drafter.adaptive=false"}, j);
  expect_identical(plain, every);
  BOOST_TEST(every.stats.spec_accepted_tokens > 0u);
  BOOST_TEST(every.stats.steps < plain.stats.steps);
  expect_identical(plain, run("spec-dflash2.yaml", {w}, j));  // the adaptive length
}

#endif

int main(int argc, char* argv[]) {
  if (!tandem::test::test_model_file()) return 77;
#ifdef DFLASH2_TRAINED
  if (!fs::exists(trained_dir() / "config.json")) {
    std::fprintf(stderr, "no trained drafter at %s: skipped\n", trained_dir().c_str());
    return 77;
  }
#endif
  return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
