// bench_scenarios: the four serving scenarios of issue 5 (warm follow-up, tool call in a long
// load, cold prompt among chatty sessions, agents with tool gaps), each under both schedulers
// (and, for the agents, both retention policies) in one run. Prints a table and one JSON
// line. Timings are measurements, never assertions: CI runs `--scale smoke` only to show the
// scenarios run end to end.
//
//   TANDEM_SOURCE_ROOT=. build/bench/scenarios/bench_scenarios --scale full
//   build/bench/scenarios/bench_scenarios --scale smoke --scenario 2
//   bench_scenarios --scale h200 --backend cuda --model /tmp/model.gguf   # scripts/gpu-scenarios.sh
#include <chrono>
#include <cstdio>
#include <fmt/format.h>
#include <iostream>
#include <string>

#include "scenarios.hpp"

using namespace tandem::bench;

namespace {

double value(const row& r, const std::string& name) {
  for (const auto& [n, v] : r.values)
    if (n == name) return v;
  return 0;
}

double ratio(const row& r) {
  const size_t slash = r.ratio_of.find('/');
  const double den = value(r, r.ratio_of.substr(slash + 1));
  return den != 0 ? value(r, r.ratio_of.substr(0, slash)) / den : 0;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) o += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return o;
}

void print(const std::vector<row>& rows, const context& x, const std::vector<std::pair<std::string, double>>& wall) {
  std::cout << fmt::format("{:<26} {:<28} {:>44}  {:>7}  {}\n", "scenario", "metric", "per configuration", "ratio", "goal");
  const std::string backend = x.t.backend.empty() ? (x.t.pipeline.empty() ? "cpu" : "pipeline") : x.t.backend;
  std::string json = fmt::format("{{\"bench\":\"scenarios\",\"scale\":\"{}\",\"backend\":\"{}\",\"rows\":[", x.s.name,
                                 json_escape(backend));
  for (size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    std::string vals, jv;
    for (const auto& [n, v] : r.values) {
      vals += fmt::format("{}={:.4g}{} ", n, v, r.unit);
      jv += fmt::format("{}\"{}\":{:.6g}", jv.empty() ? "" : ",", n, v);
    }
    std::cout << fmt::format("{:<26} {:<28} {:>44}  {:>7.3f}  {} ({})\n", r.scenario, r.metric, vals, ratio(r), r.goal, r.ratio_of);
    json += fmt::format("{}{{\"scenario\":\"{}\",\"metric\":\"{}\",\"unit\":\"{}\",\"values\":{{{}}},\"ratio\":\"{}\","
                        "\"ratio_value\":{:.6g},\"goal\":\"{}\"}}",
                        i ? "," : "", r.scenario, r.metric, r.unit, jv, r.ratio_of, ratio(r), r.goal);
  }
  json += "],\"wall_s\":{";
  for (size_t i = 0; i < wall.size(); ++i) json += fmt::format("{}\"{}\":{:.1f}", i ? "," : "", wall[i].first, wall[i].second);
  std::cout << json << "}}\n";
}

int usage() {
  std::cerr << "usage: bench_scenarios [--scale smoke|full|h200] [--scenario 1|2|3|4|all]\n"
               "                       [--backend cpu|cuda] [--pipeline FILE] [--model FILE|NAME] [--set k=v]...\n"
               "  --backend cpu (default) runs pipelines/cpu.yaml and pipelines/warm_bypass.yaml; any other\n"
               "  backend, or --pipeline, runs one base pipeline (default pipelines/default.yaml) with\n"
               "  backend.plugin and scheduler.plugin set on it.\n";
  return 2;
}

}  // namespace

int main(int argc, char** argv) {
  std::string scale_name = "full", which = "all";
  target t;
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    const bool has = i + 1 < argc;
    if (a == "--scale" && has) scale_name = argv[++i];
    else if (a == "--scenario" && has) which = argv[++i];
    else if (a == "--backend" && has) t.backend = argv[++i];
    else if (a == "--pipeline" && has) t.pipeline = argv[++i];
    else if (a == "--model" && has) t.model = argv[++i];
    else if (a == "--set" && has) t.overrides.emplace_back(argv[++i]);
    else return usage();
  }
  try {
    context x{scale_named(scale_name), t, {}, {}};
    x.schedulers = {{"fcfs", "fcfs", "lru"}, {"warm_bypass", "warm_bypass", "lru"}};
    x.agents = {{"fcfs+lru", "fcfs", "lru"},
                {"fcfs+session", "fcfs", "session"},
                {"warm_bypass+lru", "warm_bypass", "lru"},
                {"warm_bypass+session", "warm_bypass", "session"}};
    std::vector<row> rows;
    std::vector<std::pair<std::string, double>> wall;
    auto run = [&](const char* n, std::vector<row> (*f)(const context&)) {
      if (which != "all" && which != n) return;
      const auto t0 = std::chrono::steady_clock::now();
      std::vector<row> more = f(x);
      wall.emplace_back(n, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      rows.insert(rows.end(), more.begin(), more.end());
    };
    run("1", warm_follow_up);
    run("2", tool_call_in_long_load);
    run("3", cold_among_chatty);
    run("4", agents_with_tool_gaps);
    if (rows.empty()) return usage();
    print(rows, x, wall);
  } catch (const std::exception& e) {
    std::cerr << "bench_scenarios: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
