// Scenarios 1 and 2: a warm follow-up behind a running generation and a cold document load;
// a short tool call arriving during a long cold document load.
#include <cstdlib>
#include <filesystem>

#include "scenarios.hpp"

namespace tandem::bench {

std::unique_ptr<runtime> open_runtime(const context& x, const config_run& c, std::vector<std::string> extra) {
  const scale& s = x.s;
  const char* root = std::getenv("TANDEM_SOURCE_ROOT");
  const std::filesystem::path pipelines = std::filesystem::path(root ? root : ".") / "pipelines";
  std::filesystem::path file;
  std::vector<std::string> o;
  if (x.t.pipeline.empty() && (x.t.backend.empty() || x.t.backend == "cpu")) {
    // The repository's CPU pipelines, which differ in the scheduler line.
    file = pipelines / (c.scheduler == "fcfs" ? "cpu.yaml" : "warm_bypass.yaml");
  } else {
    // One base pipeline (default.yaml: backend auto) with the backend and scheduler set on it.
    file = x.t.pipeline.empty() ? pipelines / "default.yaml" : std::filesystem::path(x.t.pipeline);
    if (!x.t.backend.empty()) o.push_back("backend.plugin=" + x.t.backend);
    o.push_back("scheduler.plugin=" + c.scheduler);
  }
  if (!x.t.model.empty()) o.push_back("model=" + x.t.model);
  for (const std::string& kv : std::initializer_list<std::string>{
           "engine.max_model_len=" + std::to_string(s.max_model_len),
           "engine.kv_tokens=" + std::to_string(s.kv_tokens),
           "engine.page_size=16",
           "engine.warm_tokens=" + std::to_string(s.page_tokens),
           "engine.retention=" + c.retention,
           "scheduler.max_batch=" + std::to_string(s.max_batch),
           "scheduler.max_tokens_per_step=" + std::to_string(s.budget),
       })
    o.push_back(kv);
  if (c.scheduler == "warm_bypass") {
    o.push_back("scheduler.page_tokens=" + std::to_string(s.page_tokens));
    o.push_back("scheduler.late_cap=" + std::to_string(s.late_cap));
    o.push_back("scheduler.max_wait_ms=" + std::to_string(s.max_wait_ms));
  }
  o.insert(o.end(), extra.begin(), extra.end());
  o.insert(o.end(), x.t.overrides.begin(), x.t.overrides.end());
  auto rt = runtime::open(file, {.overrides = o, .allow_pull = false, .progress = {}});
  if (s.warm_up) {
    // One prefill of two chunks and a few decodes, so first-use costs (module loading,
    // library handles, workspace growth) stay out of the timings; then forget its pages.
    bool done = false;
    generation_request r;
    r.prompt = fresh_tokens(7, std::min<int64_t>(2 * s.budget, s.max_model_len / 2));
    r.max_new_tokens = 8;
    r.ignore_eos = true;
    r.on_event = [&done](const token_event& ev) { done = done || ev.finished != finish_reason::none; };
    rt->eng().submit(std::move(r));
    while (!done) rt->eng().step();
    rt->eng().reset_prefix_cache();
  }
  return rt;
}

namespace {

// A session's first turn fills the cache; then a long generation starts, a cold document
// is queued, and the session's follow-up (uncached remainder well under page_tokens)
// arrives behind both.
double warm_ttft(const context& x, const config_run& c) {
  const auto& z = x.s.s1;
  auto rt = open_runtime(x, c);
  driver d(rt->eng());
  const int first = d.plan({"session", 0, -1, 0, [&] { return fresh_tokens(1, z.session); }, 8, "a"});
  d.plan({"generation", 0, first, 0, [] { return fresh_tokens(2, 64); }, z.generation, ""});
  d.plan({"cold", 0, first, z.cold_after_s, [&] { return fresh_tokens(3, z.doc); }, 4, ""});
  const int follow = d.plan({"warm", 0, first, z.warm_after_s, [&] {
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

std::vector<row> warm_follow_up(const context& x) {
  row r{"1 warm follow-up", "warm TTFT", "s", {}, "warm_bypass/fcfs", "<= 0.10"};
  for (const config_run& c : x.schedulers) r.values.emplace_back(c.name, warm_ttft(x, c));
  return {r};
}

std::vector<row> tool_call_in_long_load(const context& x) {
  const auto& z = x.s.s2;
  row ttft{"2 tool call in long load", "tool-call TTFT", "s", {}, "warm_bypass/fcfs", "<= 0.05"};
  row tput{"2 tool call in long load", "long prefill throughput", "tok/s", {}, "warm_bypass/fcfs", ">= 0.95"};
  for (const config_run& c : x.schedulers) {
    auto rt = open_runtime(x, c);
    driver d(rt->eng());
    const int load = d.plan({"cold", 0, -1, 0, [&] { return fresh_tokens(10, z.doc); }, 1, ""});
    planned tool{"tool", z.tool_at_s, -1, 0, [&] { return fresh_tokens(11, z.tool); }, 8, ""};
    tool.min_steps = z.tool_after_steps;
    const int t = d.plan(std::move(tool));
    d.run();
    ttft.values.emplace_back(c.name, d.result(t).ttft());
    tput.values.emplace_back(c.name, static_cast<double>(z.doc) / d.result(load).ttft());
  }
  return {ttft, tput};
}

}  // namespace tandem::bench
