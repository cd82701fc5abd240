#define BOOST_TEST_MODULE spec_gpu
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/unit_test.hpp>

#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include "tandem/plugin_host.hpp"
#include "tandem/runtime.hpp"
#include "../test_model_file.hpp"

// Speculative decoding on backend.cuda (gpu suite), on the real model, several chat prompts
// x 64 tokens decoded together (later prompts join while earlier ones decode).
//  - With backend.batch_invariant (every row on the GEMV and the prefill attention kernel,
//    gpu_batch_invariant), greedy output with drafter.ngram, drafter.suffix and
//    drafter.dflash2 (its shipped weights, fed the target's hidden states from the GPU;
//    drafting every step, and with the adaptive length) is token for token the output
//    without a drafter: verification is exact.
//  - With the default kernels a verify step's 1 + k rows take other kernels than a plain
//    decode step (the f16 GEMM from 5 rows on, the prefill attention kernel), so logits
//    differ beyond the last bits and a continuation may part from the plain one; the test
//    prints where and at what plain-run margin, and checks that drafts are accepted.
// Skips (77) without a usable backend.cuda or without the model file.
using namespace tandem;

namespace {

std::filesystem::path source_root() {
  const char* r = std::getenv("TANDEM_SOURCE_ROOT");
  return r ? r : ".";
}

struct outcome {
  std::vector<int32_t> tokens;
  std::vector<float> margins;  // best - second logit of each step (when asked for)
};

struct run_result {
  std::vector<outcome> outputs;
  engine_stats stats;
};

const std::vector<std::string> prompts = {
    "Count from 1 to 200, separated by commas.", "What is the capital of France?",
    "Write the alphabet in capital letters, with spaces between the letters.",
    "Write a Python function that returns the n-th Fibonacci number, with a docstring and tests.",
    "Tell me a short story about a lighthouse keeper who finds a message in a bottle."};

run_result run(const std::string& pipeline, std::vector<std::string> overrides, bool margins) {
  overrides.push_back("backend.plugin=backend.cuda");
  overrides.push_back(std::string("model=") + std::getenv("TANDEM_TEST_MODEL"));
  auto rt = runtime::open(source_root() / "pipelines" / pipeline, {.overrides = overrides, .allow_pull = false, .progress = {}});
  engine& eng = rt->eng();
  run_result res;
  res.outputs.resize(prompts.size());
  size_t submitted = 0;
  for (int step = 0; step < 5000; ++step) {
    if (submitted < prompts.size() && step == static_cast<int>(submitted) * 3) {  // joining while others decode
      const std::vector<chat_message> msgs{{"user", prompts[submitted]}};
      generation_request r;
      r.prompt = rt->tokens_for_chat(msgs);
      r.max_new_tokens = 64;
      r.ignore_eos = true;
      if (margins) r.logprobs = 2;
      r.on_event = [&res, k = submitted](const token_event& ev) {
        if (ev.token < 0) return;
        res.outputs[k].tokens.push_back(ev.token);
        if (ev.top_logprobs.size() >= 2)
          res.outputs[k].margins.push_back(ev.top_logprobs[0].second - ev.top_logprobs[1].second);
      };
      eng.submit(std::move(r));
      ++submitted;
    }
    eng.step();
    eng.check_invariants();
    if (submitted == prompts.size() && !eng.has_work()) break;
  }
  BOOST_REQUIRE(!eng.has_work());
  res.stats = eng.stats();
  BOOST_TEST(res.stats.kv_pages_used == 0);
  return res;
}

// Where each prompt's speculative continuation first parts from the plain one (its
// length when it never does), with the plain run's best-vs-second margin there.
std::vector<size_t> agreement(const run_result& plain, const run_result& spec, const std::string& what) {
  std::vector<size_t> agree(prompts.size(), 0);
  for (size_t k = 0; k < prompts.size(); ++k) {
    const auto& want = plain.outputs[k];
    const auto& got = spec.outputs[k].tokens;
    BOOST_TEST(got.size() == want.tokens.size(), what << ", prompt " << k << ": length");
    size_t& a = agree[k];
    while (a < got.size() && a < want.tokens.size() && got[a] == want.tokens[a]) ++a;
    BOOST_TEST_MESSAGE(what << ", prompt " << k << ": " << a << " of " << want.tokens.size() << " tokens identical"
                            << (a < want.margins.size() ? ", plain margin there " + std::to_string(want.margins[a])
                                                        : std::string()));
  }
  return agree;
}

}  // namespace

BOOST_AUTO_TEST_CASE(greedy_with_each_drafter_is_plain_greedy_with_batch_invariant_kernels) {
  const std::string inv = "backend.batch_invariant=true";
  const run_result plain = run("default.yaml", {inv}, true);
  const std::string dflash2_weights =
      "drafter.weights=" + (source_root() / "drafters" / "smollm2-135m-instruct-dflash2").string();
  for (const char* pipeline : {"spec-ngram.yaml", "spec-suffix.yaml", "spec-dflash2.yaml"}) {
    for (bool adaptive : {false, true}) {
      std::vector<std::string> sets{inv, std::string("drafter.adaptive=") + (adaptive ? "true" : "false")};
      if (std::string(pipeline) == "spec-dflash2.yaml") sets.push_back(dflash2_weights);
      const run_result spec = run(pipeline, sets, false);
      const std::string what = std::string(pipeline) + (adaptive ? " (adaptive)" : " (every step)");
      BOOST_TEST(spec.stats.spec_accepted_tokens > 0u, what);
      if (!adaptive) BOOST_TEST(spec.stats.steps < plain.stats.steps, what);
      BOOST_TEST_MESSAGE(what << ": accepted " << spec.stats.spec_accepted_tokens << " of "
                              << spec.stats.spec_draft_tokens << " draft tokens; " << spec.stats.steps
                              << " steps against " << plain.stats.steps);
      const std::vector<size_t> agree = agreement(plain, spec, what);
      for (size_t k = 0; k < prompts.size(); ++k)
        BOOST_TEST(agree[k] == plain.outputs[k].tokens.size(), what << ", prompt " << k << ": parts at token " << agree[k]);
    }
  }
}

BOOST_AUTO_TEST_CASE(default_kernels_accept_drafts_and_report_where_output_parts) {
  const run_result plain = run("default.yaml", {}, true);
  for (const char* pipeline : {"spec-ngram.yaml", "spec-suffix.yaml"}) {
    const run_result spec = run(pipeline, {"drafter.adaptive=false"}, false);
    BOOST_TEST(spec.stats.spec_accepted_tokens > 0u, pipeline);
    BOOST_TEST(spec.stats.steps < plain.stats.steps, pipeline);
    agreement(plain, spec, std::string(pipeline) + " (default kernels)");
  }
}

int main(int argc, char* argv[]) {
  {
    plugin_host host(plugin_host::default_search_path());
    const plugin_host::lookup_result cuda = host.lookup("backend.cuda");
    const probe_result probe = cuda.desc ? host.probe("backend.cuda") : probe_result{0, cuda.error};
    if (probe.score <= 0) {
      std::fprintf(stderr, "backend.cuda cannot run here (%s): skipped\n", probe.reason.c_str());
      return 77;
    }
  }
  if (!tandem::test::test_model_file()) return 77;
  return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);
}
