#pragma once
// The engine loop the speculative-decoding tests share: open a pipeline, submit each job at
// its step (requests join while others decode), step until every request is done checking
// the pool's bookkeeping after each step, and collect each request's tokens and finish.
#include <boost/test/unit_test.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "tandem/runtime.hpp"

namespace spec_test {

inline std::filesystem::path source_root() {
  const char* r = std::getenv("TANDEM_SOURCE_ROOT");
  return r ? r : ".";
}

struct job {
  std::vector<int32_t> prompt;
  int at_step = 0;
  int64_t max_new = 48;
  tandem::sampling_params sampling;
  float presence_penalty = 0;
  std::vector<int32_t> stop_ids;
};

struct outcome {
  std::vector<int32_t> tokens;
  tandem::finish_reason why = tandem::finish_reason::none;
  bool operator==(const outcome&) const = default;
};

struct run_result {
  std::vector<outcome> outputs;
  tandem::engine_stats stats;
};

inline run_result run(const std::string& pipeline, const std::vector<std::string>& overrides,
                      const std::vector<job>& jobs) {
  using namespace tandem;
  auto rt = runtime::open(source_root() / "pipelines" / pipeline, {.overrides = overrides, .allow_pull = false, .progress = {}});
  engine& eng = rt->eng();
  run_result res;
  res.outputs.resize(jobs.size());
  size_t submitted = 0;
  for (int step = 0; step < 20000; ++step) {
    for (size_t k = 0; k < jobs.size(); ++k) {
      if (jobs[k].at_step != step) continue;
      generation_request r;
      r.prompt = jobs[k].prompt;
      r.max_new_tokens = jobs[k].max_new;
      r.sampling = jobs[k].sampling;
      r.presence_penalty = jobs[k].presence_penalty;
      r.stop_token_ids = jobs[k].stop_ids;
      r.ignore_eos = true;
      r.on_event = [&res, k](const token_event& ev) {
        if (ev.token >= 0) res.outputs[k].tokens.push_back(ev.token);
        if (ev.finished != finish_reason::none) res.outputs[k].why = ev.finished;
      };
      eng.submit(std::move(r));
      ++submitted;
    }
    eng.step();
    eng.check_invariants();
    if (submitted == jobs.size() && !eng.has_work()) break;
  }
  BOOST_REQUIRE(!eng.has_work());
  res.stats = eng.stats();
  BOOST_TEST(res.stats.kv_pages_used == 0);  // every page returned, drafts' included
  return res;
}

// A user message as the default model's chat template tokenizes it.
inline std::vector<int32_t> chat(const std::string& text) {
  using namespace tandem;
  static std::unique_ptr<runtime> rt =
      runtime::open(source_root() / "pipelines" / "cpu.yaml", {.overrides = {}, .allow_pull = false, .progress = {}});
  const std::vector<chat_message> msgs{{"user", text}};
  return rt->tokens_for_chat(msgs);
}

// The default model's chat prompts the tests decode together: counting, a fact, the
// alphabet and the days of the week, one joining every 3 steps, max_new tokens each.
inline std::vector<job> default_model_jobs(int64_t max_new) {
  std::vector<job> jobs;
  int at = 0;
  for (const char* p : {"Count from 1 to 200, separated by commas.", "What is the capital of France?",
                        "Write the alphabet in capital letters, with spaces between the letters.",
                        "List the days of the week, then list them again in reverse order."}) {
    jobs.push_back({chat(p), at, max_new, {}, 0, {}});
    at += 3;  // continuous batching: requests join while others decode
  }
  return jobs;
}

}  // namespace spec_test
