#define BOOST_TEST_MODULE prefix_engine
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <map>
#include <random>

#include "tandem/runtime.hpp"

// The engine with the default model: prefix caching must change nothing but speed. The same
// workload (shared system prompts, multi-turn follow-ups that extend an earlier prompt and
// its answer, cancellations, a pool small enough to evict and preempt) runs with caching
// off and on, under fcfs and under warm_bypass; greedy outputs must be token-identical, and
// the pool's bookkeeping is checked after every step.

using namespace tandem;

namespace {

std::filesystem::path source_root() {
  const char* r = std::getenv("TANDEM_SOURCE_ROOT");
  return r ? r : ".";
}

struct job {
  int at_step;             // submitted before this step
  std::vector<int32_t> prompt;
  int follow_up_of = -1;   // prompt = that job's prompt + output + this prompt
  int cancel_at = -1;      // cancelled before this step (-1: never)
};

// Token ids lo .. lo + span - 1 (the default model: 300 + 8000; the tiny GLM: 0 + 500).
std::vector<job> workload(int32_t lo, uint32_t span) {
  std::mt19937 rng(7);
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(lo + static_cast<int32_t>(rng() % span));
    return t;
  };
  const std::vector<int32_t> system_a = tokens(40), system_b = tokens(23);
  std::vector<job> jobs;
  for (int i = 0; i < 10; ++i) {
    job j;
    j.at_step = i;
    j.prompt = i % 3 == 2 ? system_b : system_a;
    auto tail = tokens(5 + i * 2);
    j.prompt.insert(j.prompt.end(), tail.begin(), tail.end());
    if (i == 4) j.cancel_at = 16;
    jobs.push_back(j);
  }
  for (int i = 0; i < 4; ++i) {  // second turns, once the first ones are done
    job j;
    j.at_step = 60 + i * 2;
    j.follow_up_of = i;
    j.prompt = tokens(6);
    jobs.push_back(j);
  }
  return jobs;
}

struct run_result {
  std::map<int, std::vector<int32_t>> outputs;  // job index -> generated tokens
  engine_stats stats;
};

run_result run(const std::string& pipeline, std::vector<std::string> overrides, int32_t lo = 300,
               uint32_t span = 8000) {
  overrides.push_back("engine.kv_tokens=256");  // 16 pages of 16: eviction and preemption
  overrides.push_back("engine.page_size=16");
  auto rt = runtime::open(source_root() / "pipelines" / pipeline, {.overrides = overrides, .allow_pull = false, .progress = {}});
  engine& eng = rt->eng();
  std::vector<job> jobs = workload(lo, span);
  run_result res;
  std::map<int, uint64_t> ids;
  std::map<int, bool> done;
  for (int step = 0; step < 2000; ++step) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      job& j = jobs[k];
      const int key = static_cast<int>(k);
      if (j.at_step == step) {
        generation_request r;
        if (j.follow_up_of >= 0) {
          BOOST_REQUIRE(done[j.follow_up_of]);
          r.prompt = jobs[j.follow_up_of].prompt;
          const auto& out = res.outputs[j.follow_up_of];
          r.prompt.insert(r.prompt.end(), out.begin(), out.end());
        }
        r.prompt.insert(r.prompt.end(), j.prompt.begin(), j.prompt.end());
        j.prompt = r.prompt;
        r.max_new_tokens = 12;
        r.ignore_eos = true;
        r.session = "s" + std::to_string(key % 4);
        r.on_event = [&res, &done, key](const token_event& ev) {
          if (ev.token >= 0) res.outputs[key].push_back(ev.token);
          if (ev.finished != finish_reason::none) done[key] = true;
        };
        ids[key] = eng.submit(std::move(r));
      }
      if (j.cancel_at == step) eng.cancel(ids[key]);
    }
    eng.step();
    eng.check_invariants();
    if (step > jobs.back().at_step && !eng.has_work()) break;
  }
  BOOST_REQUIRE(!eng.has_work());
  res.stats = eng.stats();
  BOOST_TEST_MESSAGE(pipeline << ": hits " << res.stats.prefix_hits << "/" << res.stats.prefix_queries
                              << " tokens, preemptions " << res.stats.preemptions << ", evicted pages "
                              << res.stats.pages_evicted << ", steps " << res.stats.steps);
  BOOST_TEST(res.stats.kv_pages_used == 0);  // every page returned
  res.outputs.erase(4);                      // cancelled: its length depends on timing only
  return res;
}

}  // namespace

BOOST_AUTO_TEST_CASE(caching_on_and_off_are_token_identical_under_greedy) {
  const run_result off = run("cpu.yaml", {"engine.prefix_caching=false"});
  const run_result on = run("cpu.yaml", {"engine.prefix_caching=true"});
  const run_result sha = run("cpu.yaml", {"engine.prefix_caching=true", "engine.prefix_hash=sha256",
                                          "engine.retention=session", "engine.retention_share=0.3"});
  BOOST_TEST(off.stats.prefix_hits == 0u);
  BOOST_TEST(on.stats.prefix_hits > 0u);
  BOOST_TEST(sha.stats.prefix_hits > 0u);
  BOOST_TEST(on.stats.pages_evicted > 0u);  // the pool is small enough to evict
  BOOST_TEST(on.outputs.size() == 13u);
  for (const auto& [k, out] : off.outputs) {
    BOOST_TEST_CONTEXT("job " << k) {
      BOOST_TEST(out.size() == 12u);
      BOOST_TEST(on.outputs.at(k) == out, boost::test_tools::per_element());
      BOOST_TEST(sha.outputs.at(k) == out, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_same_workload_under_both_scheduler_pipelines) {
  const run_result fcfs = run("cpu.yaml", {});
  const run_result warm = run("warm_bypass.yaml", {});
  BOOST_TEST(warm.outputs.size() == fcfs.outputs.size());
  for (const auto& [k, out] : fcfs.outputs)
    BOOST_TEST_CONTEXT("job " << k) { BOOST_TEST(warm.outputs.at(k) == out, boost::test_tools::per_element()); }
  BOOST_TEST(warm.stats.prefix_hits > 0u);
}

// The same on the GLM-5-family model (MLA latent and DSA indexer caches, shared by page):
// prompts of 45+ tokens run past index_topk, so cached pages feed the sparse path too.
BOOST_AUTO_TEST_CASE(glm_caching_on_and_off_are_token_identical_under_greedy) {
  std::filesystem::current_path(source_root());  // the pipeline names its model relative to the repository
  const run_result off = run("safetensors.yaml", {"engine.prefix_caching=false"}, 0, 500);
  const run_result on = run("safetensors.yaml", {"engine.prefix_caching=true"}, 0, 500);
  BOOST_TEST(off.stats.prefix_hits == 0u);
  BOOST_TEST(on.stats.prefix_hits > 0u);
  BOOST_TEST(on.stats.pages_evicted > 0u);
  BOOST_TEST(on.outputs.size() == 13u);
  for (const auto& [k, out] : off.outputs)
    BOOST_TEST_CONTEXT("job " << k) { BOOST_TEST(on.outputs.at(k) == out, boost::test_tools::per_element()); }
}
