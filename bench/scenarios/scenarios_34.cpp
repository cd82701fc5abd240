// Scenarios 3 and 4: a cold prompt among chatty sessions; four agents in a multi-turn
// workflow with tool gaps and background load.
#include <algorithm>
#include <fmt/format.h>

#include "scenarios.hpp"

namespace tandem::bench {
namespace {

const config_run fcfs{"fcfs", "cpu.yaml"};
const config_run warm{"warm_bypass", "warm_bypass.yaml"};

// The next turn of a conversation: everything so far plus `n` new tokens.
std::function<std::vector<int32_t>()> next_turn(const driver& d, int prev, uint64_t seed, int64_t n) {
  return [&d, prev, seed, n] {
    auto p = d.result(prev).prompt;
    const auto& out = d.result(prev).output;
    p.insert(p.end(), out.begin(), out.end());
    auto more = fresh_tokens(seed, n);
    p.insert(p.end(), more.begin(), more.end());
    return p;
  };
}

double percentile(std::vector<double> v, double q) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[static_cast<size_t>(q * static_cast<double>(v.size() - 1))];
}

}  // namespace

std::vector<row> cold_among_chatty(const scale& s) {
  std::vector<row> rows;
  for (int sessions : s.smoke ? std::vector<int>{2} : std::vector<int>{2, 4}) {
    const std::string name = fmt::format("3 cold among {} chatty", sessions);
    row ttft{name, "cold TTFT", "s", {}, "warm_bypass/fcfs", fmt::format("<= max_wait {} s + capped prefill", s.max_wait_ms / 1000)};
    row itl{name, "chatty ITL p99", "s", {}, "warm_bypass/fcfs", "(lower is better)"};
    for (const config_run& c : {fcfs, warm}) {
      auto rt = open_runtime(s, c);
      driver d(rt->eng());
      const int turns = s.smoke ? 3 : 8;
      std::vector<int> chatty;
      for (int k = 0; k < sessions; ++k) {
        int prev = d.plan({"chatty", 0, -1, 0, [k] { return fresh_tokens(100 + k, 100); }, s.smoke ? 12 : 24, fmt::format("c{}", k)});
        chatty.push_back(prev);
        for (int t = 1; t < turns; ++t) {
          prev = d.plan({"chatty", 0, prev, 0, next_turn(d, prev, 1000 + k * 100 + t, 16), s.smoke ? 12 : 24, fmt::format("c{}", k)});
          chatty.push_back(prev);
        }
      }
      const int cold = d.plan({"cold", s.smoke ? 0.5 : 1.0, -1, 0, [&] { return fresh_tokens(99, s.smoke ? 400 : 1600); }, 4, ""});
      d.run();
      ttft.values.emplace_back(c.name, d.result(cold).ttft());
      std::vector<double> gaps;
      for (int i : chatty) {
        const auto& ts = d.result(i).token_s;
        for (size_t j = 1; j < ts.size(); ++j) gaps.push_back(ts[j] - ts[j - 1]);
      }
      itl.values.emplace_back(c.name, percentile(gaps, 0.99));
    }
    rows.push_back(ttft);
    rows.push_back(itl);
  }
  return rows;
}

namespace {

struct agent_result {
  double hit_rate = 0;     // cached / prompt tokens over turns 2.., all agents
  double replay_hit = 0;   // cached / what the previous turn left computed (the session replay)
  double reread_ttft = 0;  // an agent's whole session sent again after the background load
  double cold_ttft = 0;    // a never-seen prompt of the same length
};

agent_result run_agents(const scale& s, const config_run& c) {
  // A pool that holds the agents' sessions, but not those plus the background documents.
  auto rt = open_runtime(s, c, {"engine.retention_s=120", "engine.retention_share=0.8",
                                fmt::format("engine.kv_tokens={}", s.smoke ? 1536 : 4096)});
  driver d(rt->eng());
  const int64_t system = s.smoke ? 200 : 600, tool_result = s.smoke ? 48 : 64, doc = s.smoke ? 300 : 600;
  const int turns = s.smoke ? 3 : 4, docs = s.smoke ? 4 : 12;
  const double gap = s.smoke ? 0.5 : 2.5, every = s.smoke ? 0.4 : 0.5;  // tool latency, load interval
  std::vector<std::pair<int, int>> later_turns;  // (turn, previous turn)
  int agent0_last = -1;
  std::vector<int> last_turns;
  for (int a = 0; a < 4; ++a) {
    const std::string session = fmt::format("agent{}", a);
    int prev = d.plan({"agent", 0.05 * a, -1, 0, [a, system] { return fresh_tokens(200 + a, system); }, 16, session});
    for (int t = 1; t < turns; ++t) {
      const int turn = d.plan({"agent", 0, prev, gap, next_turn(d, prev, 300 + a * 10 + t, tool_result), 16, session});
      later_turns.emplace_back(turn, prev);
      prev = turn;
    }
    if (a == 0) agent0_last = prev;
    last_turns.push_back(prev);
  }
  int last_doc = -1;
  for (int k = 0; k < docs; ++k)
    last_doc = d.plan({"background", 0.3 + every * k, -1, 0, [k, doc] { return fresh_tokens(500 + k, doc); }, 4, ""});
  const int reread = d.plan({"reread", 0, last_doc, 0.1, next_turn(d, agent0_last, 900, 0), 1, "agent0",
                            last_turns});
  const int cold = d.plan({"cold", 0, reread, 0.1, [&d, reread] {
                             return fresh_tokens(901, static_cast<int64_t>(d.result(reread).prompt.size()));
                           }, 1, ""});
  d.run();
  agent_result r;
  double cached = 0, prompt = 0, replayable = 0;
  for (auto [i, prev] : later_turns) {
    cached += static_cast<double>(d.result(i).cached);
    prompt += static_cast<double>(d.result(i).prompt.size());
    // Full pages of what the previous turn computed (its last sampled token never was).
    const auto computed = static_cast<int64_t>(d.result(prev).prompt.size() + d.result(prev).output.size()) - 1;
    replayable += static_cast<double>(computed / 16 * 16);
  }
  r.hit_rate = prompt > 0 ? cached / prompt : 0;
  r.replay_hit = replayable > 0 ? cached / replayable : 0;
  r.reread_ttft = d.result(reread).ttft();
  r.cold_ttft = d.result(cold).ttft();
  return r;
}

}  // namespace

std::vector<row> agents_with_tool_gaps(const scale& s) {
  const config_run runs[] = {{"fcfs+lru", "cpu.yaml", "lru"},
                             {"warm_bypass+lru", "warm_bypass.yaml", "lru"},
                             {"warm_bypass+session", "warm_bypass.yaml", "session"}};
  row hit{"4 agents + background", "prefix hit rate, turns 2+", "", {}, "warm_bypass+session/warm_bypass+lru",
          "(new tool tokens always miss)"};
  row replay{"4 agents + background", "session replay hit", "", {}, "warm_bypass+session/warm_bypass+lru",
             ">= 0.95 (session)"};
  row reread{"4 agents + background", "re-read TTFT / cold TTFT", "", {}, "warm_bypass+session/warm_bypass+lru", "<= 0.03 (session)"};
  row ttft{"4 agents + background", "cached re-read TTFT", "s", {}, "warm_bypass+session/warm_bypass+lru", ""};
  for (const config_run& c : runs) {
    const agent_result r = run_agents(s, c);
    hit.values.emplace_back(c.name, r.hit_rate);
    replay.values.emplace_back(c.name, r.replay_hit);
    reread.values.emplace_back(c.name, r.cold_ttft > 0 ? r.reread_ttft / r.cold_ttft : 0);
    ttft.values.emplace_back(c.name, r.reread_ttft);
  }
  return {hit, replay, reread, ttft};
}

}  // namespace tandem::bench
