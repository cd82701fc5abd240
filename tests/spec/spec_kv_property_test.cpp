#define BOOST_TEST_MODULE spec_kv_property
#include <boost/test/unit_test.hpp>

#include <map>
#include <random>

#include "fcfs_scheduler.hpp"
#include "kv_model.hpp"
#include "tandem/drafter.hpp"
#include "tandem/engine.hpp"

// Property tests of speculative decoding's KV handling, on kv_model (its tokens are a hash
// of what it reads back from its paged KV) with an oracle drafter that makes every pattern
// of accepts and rejects: random draft lengths, each draft right up to a random point and
// wrong after it. For random workloads (shared prompt prefixes, follow-up turns that extend
// an earlier prompt and answer, requests joining while others decode):
//  - outputs equal a run without drafts, and no KV read ever finds another position's slot;
//  - afterwards the pool and the prefix cache equal the plain run's: no page held, as many
//    cached, and probing every conversation again hits the same number of cached tokens,
//    whose pages hold the right tokens (kv_model checks every slot it reads);
//  - in a pool small enough to preempt, outputs still equal and nothing leaks;
//  - drafts count against the scheduler's token budget: no step computes more rows than
//    max_tokens_per_step, and with no budget left no draft is made.

using namespace tandem;
using test::kv_model;

namespace {

// Proposes up to k tokens: the true continuation for the first `right` of them (random),
// then wrong ones, so the engine sees every accept / reject pattern.
class oracle_drafter final : public drafter {
 public:
  oracle_drafter(int k, uint64_t seed, bool adaptive) : k_(k), rng_(seed), adaptive_(adaptive) {}
  draft_limits limits() const override { return {k_, 0, adaptive_}; }
  std::vector<int32_t> propose(uint64_t, const draft_context& ctx) override {
    const int n = static_cast<int>(rng_() % static_cast<uint64_t>(ctx.max_draft + 1));
    const int right = static_cast<int>(rng_() % static_cast<uint64_t>(n + 1));
    std::vector<int32_t> seq(ctx.tokens.begin(), ctx.tokens.end()), draft;
    for (int i = 0; i < n; ++i) {
      int32_t t = kv_model::next(seq);
      if (i >= right) t = static_cast<int32_t>((t + 1 + rng_() % (kv_model::vocab - 1)) % kv_model::vocab);
      draft.push_back(t);
      seq.push_back(t);
    }
    return draft;
  }

 private:
  int k_;
  std::mt19937_64 rng_;
  bool adaptive_;
};

// An oracle that also reads two target taps (kv_model's tap rows say (token, position)) and
// checks what the engine hands it: observe() rows are the positions it says, in order; at
// each proposal it holds exactly the committed tokens before the anchor, from its first
// observed position on, with no gap, no rejected draft and never the anchor itself.
class tapping_drafter final : public drafter {
 public:
  tapping_drafter(int k, uint64_t seed) : inner_(k, seed, false) {}
  draft_limits limits() const override { return inner_.limits(); }
  std::vector<int> target_layers() const override { return {0, 0}; }

  void observe(uint64_t seq, int64_t first_pos, std::span<const tensor_view> taps) override {
    ++observed_calls;
    if (taps.size() != 2 || taps[0].rows() != taps[1].rows()) ++violations;
    std::map<int64_t, int32_t>& held = held_[seq];
    held.erase(held.lower_bound(first_pos), held.end());  // recomputed from first_pos on
    for (int64_t r = 0; r < taps[0].rows(); ++r) {
      if (taps[0].at<float>(r, 1) != static_cast<float>(first_pos + r)) ++violations;
      held[first_pos + r] = static_cast<int32_t>(taps[0].at<float>(r, 0));
    }
  }

  std::vector<int32_t> propose(uint64_t seq, const draft_context& ctx) override {
    const auto anchor = static_cast<int64_t>(ctx.tokens.size()) - 1;
    const std::map<int64_t, int32_t>& held = held_[seq];
    if (held.empty() || held.rbegin()->first != anchor - 1 ||
        held.begin()->first + static_cast<int64_t>(held.size()) != anchor)
      ++violations;
    for (const auto& [pos, tok] : held)
      if (pos >= anchor || tok != ctx.tokens[static_cast<size_t>(pos)]) ++violations;
    return inner_.propose(seq, ctx);
  }
  void release(uint64_t seq, std::span<const int32_t>) override { held_.erase(seq); }

  int64_t violations = 0, observed_calls = 0;

 private:
  oracle_drafter inner_;
  std::map<uint64_t, std::map<int64_t, int32_t>> held_;
};

struct job {
  int at_step = 0;
  std::vector<int32_t> prompt;
  int follow_up_of = -1;  // prompt = that job's prompt + output + this prompt
  int64_t max_new = 0;
};

std::vector<job> workload(uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto tokens = [&](int n) {
    std::vector<int32_t> t;
    for (int i = 0; i < n; ++i) t.push_back(static_cast<int32_t>(rng() % kv_model::vocab));
    return t;
  };
  const std::vector<int32_t> shared = tokens(21 + static_cast<int>(rng() % 20));
  std::vector<job> jobs;
  for (int i = 0; i < 8; ++i) {
    job j;
    j.at_step = static_cast<int>(rng() % 12);
    if (i % 2 == 0) j.prompt = shared;  // a shared prefix: cache hits and duplicate pages
    const auto tail = tokens(1 + static_cast<int>(rng() % 30));
    j.prompt.insert(j.prompt.end(), tail.begin(), tail.end());
    j.max_new = 1 + static_cast<int64_t>(rng() % 70);
    jobs.push_back(j);
  }
  for (int i = 0; i < 3; ++i) jobs.push_back({0, tokens(3), i, 1 + static_cast<int64_t>(rng() % 40)});
  return jobs;
}

struct run_result {
  std::vector<std::vector<int32_t>> outputs;
  std::vector<int64_t> probe_hits;  // cached tokens when each conversation is asked again
  engine_stats stats;                // before the probes
  int64_t corrupt_reads = 0;
  std::vector<int64_t> step_rows;
};

struct setup {
  int64_t kv_pages = 256;
  int64_t max_batch = 16, max_tokens_per_step = 512;
  bool probe = true;
};

run_result run(const std::vector<job>& in, drafter* d, const setup& cfg) {
  kv_model m;
  m.allocate_kv(cfg.kv_pages, 16);
  fcfs_scheduler sched({cfg.max_batch, cfg.max_tokens_per_step, 0});
  engine::parts parts;
  parts.model = &m;
  parts.sched = &sched;
  parts.max_model_len = 4096;
  parts.kv_pages = cfg.kv_pages;
  parts.page_size = 16;
  parts.drafter = d;
  engine eng(std::move(parts));

  std::vector<job> jobs = in;
  run_result res;
  res.outputs.resize(jobs.size());
  std::vector<bool> done(jobs.size(), false);
  std::vector<bool> sent(jobs.size(), false);
  auto submit = [&](std::vector<int32_t> prompt, int64_t max_new, std::function<void(const token_event&)> cb) {
    generation_request r;
    r.prompt = std::move(prompt);
    r.max_new_tokens = max_new;
    r.ignore_eos = true;
    r.on_event = std::move(cb);
    eng.submit(std::move(r));
  };
  for (int step = 0; step < 20000; ++step) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      job& j = jobs[k];
      if (sent[k] || step < j.at_step) continue;
      if (j.follow_up_of >= 0) {
        if (!done[static_cast<size_t>(j.follow_up_of)]) continue;  // the earlier turn first
        std::vector<int32_t> p = jobs[static_cast<size_t>(j.follow_up_of)].prompt;
        const auto& out = res.outputs[static_cast<size_t>(j.follow_up_of)];
        p.insert(p.end(), out.begin(), out.end());
        p.insert(p.end(), j.prompt.begin(), j.prompt.end());
        j.prompt = p;
        j.follow_up_of = -1;
      }
      sent[k] = true;
      submit(j.prompt, j.max_new, [&res, &done, k](const token_event& ev) {
        if (ev.token >= 0) res.outputs[k].push_back(ev.token);
        if (ev.finished != finish_reason::none) done[k] = true;
      });
    }
    eng.step();
    eng.check_invariants();
    if (std::all_of(sent.begin(), sent.end(), [](bool b) { return b; }) && !eng.has_work()) break;
  }
  BOOST_REQUIRE(!eng.has_work());
  res.stats = eng.stats();
  BOOST_TEST(res.stats.kv_pages_used == 0);
  if (cfg.probe) {
    // Each conversation (prompt + answer) again, one at a time: the hit is what the cache holds.
    for (size_t k = 0; k < jobs.size(); ++k) {
      std::vector<int32_t> p = jobs[k].prompt;
      p.insert(p.end(), res.outputs[k].begin(), res.outputs[k].end());
      int64_t hit = -1;
      submit(p, 1, [&hit](const token_event& ev) {
        if (ev.token >= 0) hit = ev.cached_tokens;
      });
      while (eng.has_work()) eng.step();
      res.probe_hits.push_back(hit);
    }
  }
  res.corrupt_reads = m.corrupt_reads;
  res.step_rows = m.step_rows;
  return res;
}

}  // namespace

BOOST_AUTO_TEST_CASE(any_accepts_and_rejects_leave_the_pool_and_cache_of_a_plain_run) {
  for (uint64_t seed = 1; seed <= 12; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      const std::vector<job> jobs = workload(seed);
      const run_result plain = run(jobs, nullptr, {});
      oracle_drafter d(1 + static_cast<int>(seed % 7), seed * 7919, false);
      const run_result spec = run(jobs, &d, {});
      BOOST_TEST(plain.corrupt_reads == 0);
      BOOST_TEST(spec.corrupt_reads == 0);
      BOOST_TEST(spec.stats.spec_draft_tokens > 0u);
      BOOST_TEST(spec.stats.spec_accepted_tokens > 0u);
      BOOST_TEST(spec.stats.spec_accepted_tokens < spec.stats.spec_draft_tokens);
      for (size_t k = 0; k < jobs.size(); ++k) BOOST_TEST(spec.outputs[k] == plain.outputs[k]);
      BOOST_TEST(spec.stats.kv_pages_cached == plain.stats.kv_pages_cached);
      BOOST_TEST(spec.stats.pages_evicted == 0u);
      BOOST_TEST(spec.probe_hits == plain.probe_hits, boost::test_tools::per_element());
      BOOST_TEST(spec.stats.steps < plain.stats.steps);
    }
  }
}

BOOST_AUTO_TEST_CASE(adaptive_drafting_changes_nothing_but_the_draft_lengths) {
  // Which lengths it picks depends on measured step times; the outputs and the cache cannot.
  const std::vector<job> jobs = workload(99);
  const run_result plain = run(jobs, nullptr, {});
  oracle_drafter d(5, 4242, true);
  const run_result spec = run(jobs, &d, {});
  BOOST_TEST(spec.corrupt_reads == 0);
  for (size_t k = 0; k < jobs.size(); ++k) BOOST_TEST(spec.outputs[k] == plain.outputs[k]);
  BOOST_TEST(spec.stats.kv_pages_cached == plain.stats.kv_pages_cached);
  BOOST_TEST(spec.probe_hits == plain.probe_hits, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(a_pool_that_preempts_keeps_outputs_and_leaks_nothing) {
  for (uint64_t seed = 20; seed <= 25; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      const std::vector<job> jobs = workload(seed);
      const setup small{.kv_pages = 9, .max_batch = 16, .max_tokens_per_step = 512, .probe = false};
      const run_result plain = run(jobs, nullptr, small);
      oracle_drafter d(6, seed, false);
      const run_result spec = run(jobs, &d, small);
      BOOST_TEST_MESSAGE("preemptions: plain " << plain.stats.preemptions << ", spec " << spec.stats.preemptions);
      BOOST_TEST(spec.stats.preemptions + plain.stats.preemptions > 0u);
      BOOST_TEST(spec.corrupt_reads == 0);
      for (size_t k = 0; k < jobs.size(); ++k) BOOST_TEST(spec.outputs[k] == plain.outputs[k]);
    }
  }
}

BOOST_AUTO_TEST_CASE(drafts_fit_the_step_token_budget) {
  const std::vector<job> jobs = workload(7);
  const setup tight{.kv_pages = 256, .max_batch = 16, .max_tokens_per_step = 10, .probe = false};
  const run_result plain = run(jobs, nullptr, tight);
  oracle_drafter d(8, 77, false);
  const run_result spec = run(jobs, &d, tight);
  BOOST_TEST(spec.stats.spec_draft_tokens > 0u);
  for (int64_t rows : spec.step_rows) BOOST_TEST(rows <= 10);
  for (size_t k = 0; k < jobs.size(); ++k) BOOST_TEST(spec.outputs[k] == plain.outputs[k]);
  // Four sequences decoding and a budget of four tokens: nothing is left for drafts.
  std::vector<job> four;
  for (int32_t t = 0; t < 4; ++t) four.push_back({0, {t}, -1, 30});  // one-token prompts: all decode from step 2
  const setup exact{.kv_pages = 256, .max_batch = 4, .max_tokens_per_step = 4, .probe = false};
  oracle_drafter d4(8, 5, false);
  const run_result full = run(four, &d4, exact);
  for (int64_t rows : full.step_rows) BOOST_TEST(rows <= 4);
  BOOST_TEST(full.stats.spec_draft_tokens == 0u);
}

BOOST_AUTO_TEST_CASE(a_hidden_state_drafter_sees_every_committed_token_and_no_rejected_one) {
  // With the prefix cache, with preemption (recomputed tokens are observed again) and with
  // every pattern of accepts and rejects.
  for (uint64_t seed = 30; seed <= 35; ++seed) {
    BOOST_TEST_CONTEXT("seed " << seed) {
      const std::vector<job> jobs = workload(seed);
      const setup cfg = seed % 2 ? setup{} : setup{.kv_pages = 9, .max_batch = 16, .max_tokens_per_step = 512, .probe = false};
      const run_result plain = run(jobs, nullptr, cfg);
      tapping_drafter d(1 + static_cast<int>(seed % 6), seed);
      const run_result spec = run(jobs, &d, cfg);
      BOOST_TEST(d.observed_calls > 0);
      BOOST_TEST(d.violations == 0);
      BOOST_TEST(spec.stats.spec_accepted_tokens > 0u);
      BOOST_TEST(spec.corrupt_reads == 0);
      for (size_t k = 0; k < jobs.size(); ++k) BOOST_TEST(spec.outputs[k] == plain.outputs[k]);
    }
  }
}
