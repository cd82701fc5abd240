// Scenarios 3 and 4: a cold prompt among chatty sessions; four agents in a multi-turn
// workflow with tool gaps and background load.
#include <algorithm>
#include <fmt/format.h>

#include "scenarios.hpp"

namespace tandem::bench {
namespace {

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

std::vector<row> cold_among_chatty(const context& x) {
  const auto& z = x.s.s3;
  std::vector<row> rows;
  for (int sessions : z.sessions) {
    const std::string name = fmt::format("3 cold among {} chatty", sessions);
    row ttft{name, "cold TTFT", "s", {}, "warm_bypass/fcfs", fmt::format("<= max_wait {} s + capped prefill", x.s.max_wait_ms / 1000)};
    row itl{name, "chatty ITL p99", "s", {}, "warm_bypass/fcfs", "(lower is better)"};
    for (const config_run& c : x.schedulers) {
      auto rt = open_runtime(x, c);
      driver d(rt->eng());
      std::vector<int> chatty;
      for (int k = 0; k < sessions; ++k) {
        int prev = d.plan({"chatty", 0, -1, 0, [k] { return fresh_tokens(100 + k, 100); }, z.reply, fmt::format("c{}", k)});
        chatty.push_back(prev);
        for (int t = 1; t < z.turns; ++t) {
          prev = d.plan({"chatty", 0, prev, 0, next_turn(d, prev, 1000 + k * 100 + t, 16), z.reply, fmt::format("c{}", k)});
          chatty.push_back(prev);
        }
      }
      const int cold = d.plan({"cold", z.cold_at_s, -1, 0, [&] { return fresh_tokens(99, z.cold); }, 4, ""});
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
  double reread_hit = 0;   // cached / prompt tokens of the re-read
  double reread_ttft = 0;  // an agent's whole session sent again after the background load
  double cold_ttft = 0;    // a never-seen prompt of the same length
  uint64_t evicted = 0;    // pages evicted over the run
};

// Four agents, each a session of `turns` requests: a long context (system prompt, files),
// then tool results, with a tool call's latency between turns while background documents
// arrive. Then agent 0 waits on one long tool call during which more background passes
// through the cache than the whole pool holds, and re-reads its whole session. Plain LRU
// must evict the sessions by then; session retention keeps them, as the four sessions fit
// inside its share of the pool (the engine's defaults: 300 s, half the pool).
agent_result run_agents(const context& x, const config_run& c) {
  const auto& z = x.s.s4;
  auto rt = open_runtime(x, c, {fmt::format("engine.kv_tokens={}", z.kv_tokens)});
  driver d(rt->eng());
  std::vector<std::pair<int, int>> later_turns;  // (turn, previous turn)
  int agent0_last = -1;
  std::vector<int> last_turns;
  for (int a = 0; a < 4; ++a) {
    const std::string session = fmt::format("agent{}", a);
    int prev = d.plan({"agent", 0.05 * a, -1, 0, [a, n = z.system] { return fresh_tokens(200 + a, n); }, z.reply, session});
    for (int t = 1; t < z.turns; ++t) {
      const int turn = d.plan({"agent", 0, prev, z.gap_s, next_turn(d, prev, 300 + a * 10 + t, z.tool_result), z.reply, session});
      later_turns.emplace_back(turn, prev);
      prev = turn;
    }
    if (a == 0) agent0_last = prev;
    last_turns.push_back(prev);
  }
  int last_doc = -1;
  for (int k = 0; k < z.docs; ++k)
    last_doc = d.plan({"background", z.first_doc_s + z.doc_every_s * k, -1, 0, [k, n = z.doc] { return fresh_tokens(500 + k, n); }, 4, ""});
  // The long tool call: background queued once every agent's last turn is done.
  for (int k = 0; k < z.flush_docs; ++k)
    last_doc = d.plan({"background", 0, -1, 0, [k, n = z.doc] { return fresh_tokens(5000 + k, n); }, 4, "", last_turns});
  const int reread = d.plan({"reread", 0, last_doc, 0.1, next_turn(d, agent0_last, 900, 0), 1, "agent0", last_turns});
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
  r.reread_hit = static_cast<double>(d.result(reread).cached) / static_cast<double>(d.result(reread).prompt.size());
  r.reread_ttft = d.result(reread).ttft();
  r.cold_ttft = d.result(cold).ttft();
  r.evicted = rt->eng().stats().pages_evicted;
  return r;
}

}  // namespace

std::vector<row> agents_with_tool_gaps(const context& x) {
  const std::string ratio = "warm_bypass+session/warm_bypass+lru", name = "4 agents + background";
  row hit{name, "prefix hit rate, turns 2+", "", {}, ratio, "(new tool tokens always miss)"};
  row replay{name, "session replay hit", "", {}, ratio, ">= 0.95 (session)"};
  row reread_hit{name, "re-read prefix hit", "", {}, ratio, "(session: all but the last page)"};
  row reread{name, "re-read TTFT / cold TTFT", "", {}, ratio, "<= 0.03 (session)"};
  row ttft{name, "cached re-read TTFT", "s", {}, ratio, ""};
  row cold{name, "cold read TTFT", "s", {}, ratio, ""};
  row evicted{name, "pages evicted", "", {}, ratio, ""};
  for (const config_run& c : x.agents) {
    const agent_result r = run_agents(x, c);
    hit.values.emplace_back(c.name, r.hit_rate);
    replay.values.emplace_back(c.name, r.replay_hit);
    reread_hit.values.emplace_back(c.name, r.reread_hit);
    reread.values.emplace_back(c.name, r.cold_ttft > 0 ? r.reread_ttft / r.cold_ttft : 0);
    ttft.values.emplace_back(c.name, r.reread_ttft);
    cold.values.emplace_back(c.name, r.cold_ttft);
    evicted.values.emplace_back(c.name, static_cast<double>(r.evicted));
  }
  return {hit, replay, reread_hit, reread, ttft, cold, evicted};
}

}  // namespace tandem::bench
