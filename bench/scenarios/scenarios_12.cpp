// Scenarios 1 and 2: a warm follow-up behind a running generation and a cold document load;
// a short tool call arriving during a long cold document load.
#include <cstdlib>
#include <filesystem>

#include "scenarios.hpp"

namespace tandem::bench {

std::unique_ptr<runtime> open_runtime(const scale& s, const config_run& c, std::vector<std::string> extra) {
  const char* root = std::getenv("TANDEM_SOURCE_ROOT");
  const std::filesystem::path file = std::filesystem::path(root ? root : ".") / "pipelines" / c.pipeline;
  std::vector<std::string> o = {
      "engine.max_model_len=" + std::to_string(s.max_model_len),
      "engine.kv_tokens=" + std::to_string(s.kv_tokens),
      "engine.page_size=16",
      "engine.warm_tokens=" + std::to_string(s.page_tokens),
      "engine.retention=" + c.retention,
      "scheduler.max_batch=8",
      "scheduler.max_tokens_per_step=" + std::to_string(s.budget),
  };
  if (c.pipeline == "warm_bypass.yaml") {
    o.push_back("scheduler.page_tokens=" + std::to_string(s.page_tokens));
    o.push_back("scheduler.late_cap=" + std::to_string(s.late_cap));
    o.push_back("scheduler.max_wait_ms=" + std::to_string(s.max_wait_ms));
  }
  o.insert(o.end(), extra.begin(), extra.end());
  return runtime::open(file, {.overrides = o, .allow_pull = false, .progress = {}});
}

namespace {

const config_run fcfs{"fcfs", "cpu.yaml"};
const config_run warm{"warm_bypass", "warm_bypass.yaml"};

// A session's first turn fills the cache; then a long generation starts, a cold document
// is queued, and the session's follow-up (uncached remainder well under page_tokens)
// arrives behind both.
double warm_ttft(const scale& s, const config_run& c) {
  auto rt = open_runtime(s, c);
  driver d(rt->eng());
  const int64_t session_len = s.smoke ? 300 : 1500, doc = s.smoke ? 600 : 2400;
  const int first = d.plan({"session", 0, -1, 0, [&] { return fresh_tokens(1, session_len); }, 8, "a"});
  d.plan({"generation", 0, first, 0, [] { return fresh_tokens(2, 64); }, s.smoke ? 40 : 200, ""});
  d.plan({"cold", 0, first, 0.2, [&] { return fresh_tokens(3, doc); }, 4, ""});
  const int follow = d.plan({"warm", 0, first, 0.4, [&] {
                               auto p = d.result(first).prompt;
                               p.insert(p.end(), d.result(first).output.begin(), d.result(first).output.end());
                               auto more = fresh_tokens(4, 64);
                               p.insert(p.end(), more.begin(), more.end());
                               return p;
                             }, 8, "a"});
  d.run();
  return d.result(follow).ttft();
}

}  // namespace

std::vector<row> warm_follow_up(const scale& s) {
  row r{"1 warm follow-up", "warm TTFT", "s", {}, "warm_bypass/fcfs", "<= 0.10"};
  for (const config_run& c : {fcfs, warm}) r.values.emplace_back(c.name, warm_ttft(s, c));
  return {r};
}

std::vector<row> tool_call_in_long_load(const scale& s) {
  row ttft{"2 tool call in long load", "tool-call TTFT", "s", {}, "warm_bypass/fcfs", "<= 0.05"};
  row tput{"2 tool call in long load", "long prefill throughput", "tok/s", {}, "warm_bypass/fcfs", ">= 0.95"};
  for (const config_run& c : {fcfs, warm}) {
    auto rt = open_runtime(s, c);
    driver d(rt->eng());
    const int64_t doc = s.smoke ? 600 : 4000;
    const int load = d.plan({"cold", 0, -1, 0, [&] { return fresh_tokens(10, doc); }, 1, ""});
    const int tool = d.plan({"tool", s.smoke ? 0.3 : 1.0, -1, 0, [] { return fresh_tokens(11, 48); }, 8, ""});
    d.run();
    ttft.values.emplace_back(c.name, d.result(tool).ttft());
    tput.values.emplace_back(c.name, static_cast<double>(doc) / d.result(load).ttft());
  }
  return {ttft, tput};
}

}  // namespace tandem::bench
