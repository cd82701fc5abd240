#define BOOST_TEST_MODULE spec_step_trace
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <unistd.h>
#include <vector>

#include "fcfs_scheduler.hpp"
#include "kv_model.hpp"
#include "tandem/drafter.hpp"
#include "tandem/engine.hpp"
#include "tandem/error.hpp"

// The engine's per-step record on kv_model with an always-right adaptive drafter: the step
// trace (TANDEM_SPEC_TRACE / engine::set_trace) has one line per step whose kinds, drafts and
// phase times agree with engine_stats, and the adaptive draft length's cost model is timed by
// decode steps only: a prefill's rows never enter it (a 40-row prompt chunk timed as a
// 40-row step would be what the controller interpolates verify steps against).

using namespace tandem;
using test::kv_model;

namespace {

// Proposes kv_model's true continuation: every draft token is accepted.
class oracle_drafter final : public drafter {
 public:
  draft_limits limits() const override { return {3, 0, true}; }
  std::vector<int32_t> propose(uint64_t, const draft_context& ctx) override {
    std::vector<int32_t> seq(ctx.tokens.begin(), ctx.tokens.end()), draft;
    for (int i = 0; i < ctx.max_draft; ++i) {
      draft.push_back(kv_model::next(seq));
      seq.push_back(draft.back());
    }
    return draft;
  }
};

std::vector<int32_t> prompt(int n, int32_t first) {
  std::vector<int32_t> p;
  for (int i = 0; i < n; ++i) p.push_back((first + 7 * i) % static_cast<int32_t>(kv_model::vocab));
  return p;
}

std::filesystem::path temp_trace() {
  return std::filesystem::temp_directory_path() / ("spec_step_trace_" + std::to_string(::getpid()) + ".jsonl");
}

// A field of one trace line: the text after "key": up to the next ',' or '}'.
std::string raw(const std::string& line, const std::string& key) {
  const std::string tag = "\"" + key + "\":";
  const size_t at = line.find(tag);
  BOOST_REQUIRE_MESSAGE(at != std::string::npos, "no " << key << " in " << line);
  const size_t from = at + tag.size();
  return line.substr(from, line.find_first_of(",}", from) - from);
}
double num(const std::string& line, const std::string& key) { return std::stod(raw(line, key)); }

struct engine_setup {
  kv_model m;
  fcfs_scheduler sched{{16, 512, 0}};
  oracle_drafter d;
  engine::parts parts() {
    m.allocate_kv(64, 16);
    engine::parts p;
    p.model = &m;
    p.sched = &sched;
    p.max_model_len = 1024;
    p.kv_pages = 64;
    p.page_size = 16;
    p.drafter = &d;
    return p;
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(the_cost_model_is_timed_by_decode_steps_only) {
  const std::filesystem::path path = temp_trace();
  std::filesystem::remove(path);
  engine_setup setup;
  engine eng(setup.parts());
  eng.set_trace(path.string());
  auto submit = [&](std::vector<int32_t> p, int64_t max_new) {
    generation_request r;
    r.prompt = std::move(p);
    r.max_new_tokens = max_new;
    r.ignore_eos = true;
    eng.submit(std::move(r));
  };
  // A 40-token prompt prefills alone, then decodes; a 30-token one joins while it does, so
  // one step holds a prompt chunk beside a decoding sequence.
  submit(prompt(40, 1), 40);
  for (int step = 0; step < 10000 && (eng.has_work() || step <= 6); ++step) {
    if (step == 6) submit(prompt(30, 5), 20);
    eng.step();
  }
  const engine_stats st = eng.stats();
  eng.set_trace("");

  std::ifstream in(path);
  std::vector<std::string> lines;
  for (std::string l; std::getline(in, l);) lines.push_back(l);
  std::filesystem::remove(path);
  BOOST_REQUIRE_EQUAL(lines.size(), st.steps);

  // The prefill, then the first decode step: its one row untimed, and nothing timed at all.
  BOOST_TEST(raw(lines[0], "kind") == "\"other\"");
  BOOST_TEST(num(lines[0], "rows") == 40);
  BOOST_TEST(raw(lines[1], "kind") == "\"decode\"");
  BOOST_TEST(num(lines[1], "rows") == 1);
  BOOST_TEST(num(lines[1], "cost_s") == 0.0);
  BOOST_TEST(num(lines[1], "cost_largest") == 0);

  double drafted = 0, accepted = 0;
  int mixed = 0;
  for (const std::string& l : lines) {
    BOOST_TEST_CONTEXT(l) {
      // Two sequences with three draft tokens each are the largest decode step: neither
      // prompt's row count is ever in the cost model.
      BOOST_TEST(num(l, "cost_largest") <= 8);
      const std::string kind = raw(l, "kind");
      if (kind == "\"draft\"") BOOST_TEST(num(l, "drafted") > 0);
      // The controller asks for at least what the drafter returns, only of sequences that may draft.
      BOOST_TEST(num(l, "asked") >= num(l, "drafted"));
      BOOST_TEST(num(l, "eligible") <= num(l, "seqs"));
      if (num(l, "asked") > 0) BOOST_TEST(num(l, "eligible") > 0);
      if (kind == "\"decode\"") BOOST_TEST(num(l, "drafted") == 0);
      if (kind == "\"decode\"" || kind == "\"draft\"") BOOST_TEST(num(l, "rows") == num(l, "seqs") + num(l, "drafted"));
      mixed += kind == "\"other\"" && num(l, "seqs") == 2;
      const double phases = num(l, "propose_s") + num(l, "forward_s") + num(l, "sample_s") + num(l, "verify_s") +
                            num(l, "observe_s");
      BOOST_TEST(phases <= num(l, "took_s") + 1e-6);  // printed to 0.1 us
      drafted += num(l, "drafted");
      accepted += num(l, "accepted");
    }
  }
  BOOST_TEST(mixed == 1);
  BOOST_TEST(drafted == static_cast<double>(st.spec_draft_tokens));
  BOOST_TEST(accepted == static_cast<double>(st.spec_accepted_tokens));
  BOOST_TEST(st.spec_draft_tokens > 0u);

  // The stats' split of the same steps.
  BOOST_TEST(st.other_steps == 2u);
  BOOST_TEST(st.draft_steps > 0u);
  BOOST_TEST(st.decode_steps > 0u);
  BOOST_TEST(st.decode_steps + st.draft_steps + st.other_steps == st.steps);
  const auto close = boost::test_tools::tolerance(1e-9);
  BOOST_TEST(st.decode_step_seconds + st.draft_step_seconds + st.other_step_seconds == st.step_seconds, close);
  // The phases are disjoint parts of each step: together at most the steps' time.
  BOOST_TEST(st.step_propose_seconds + st.step_forward_seconds + st.step_sample_seconds + st.step_verify_seconds +
                 st.step_observe_seconds <= st.step_seconds + 1e-9);
}

BOOST_AUTO_TEST_CASE(a_trace_file_that_cannot_be_opened_is_an_error_at_engine_start) {
  const std::string bad = "/nonexistent-tandem-dir/trace.jsonl";
  const auto names_it = [&](const error& e) {
    BOOST_TEST_MESSAGE(e.what());
    return std::string(e.what()).find(bad) != std::string::npos;
  };
  {
    engine_setup setup;
    ::setenv("TANDEM_SPEC_TRACE", bad.c_str(), 1);
    BOOST_CHECK_EXCEPTION(engine eng(setup.parts()), error, [&](const error& e) {
      return names_it(e) && std::string(e.what()).find("TANDEM_SPEC_TRACE") != std::string::npos;
    });
    ::unsetenv("TANDEM_SPEC_TRACE");
  }
  engine_setup setup;
  engine eng(setup.parts());
  BOOST_CHECK_EXCEPTION(eng.set_trace(bad), error, names_it);
  BOOST_CHECK_NO_THROW(eng.set_trace(""));
}
