// bench_scenarios: the four serving scenarios of issue 5 (warm follow-up, tool call in a long
// load, cold prompt among chatty sessions, agents with tool gaps), each under both schedulers
// (and both retention policies where it matters) in one run. Prints a table and one JSON
// line. Timings are measurements, never assertions: CI runs `--scale smoke` only to show the
// scenarios run end to end.
//
//   TANDEM_SOURCE_ROOT=. build/bench/scenarios/bench_scenarios --scale full
//   build/bench/scenarios/bench_scenarios --scale smoke --scenario 2
#include <cstdio>
#include <cstring>
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

void print(const std::vector<row>& rows, const scale& s) {
  std::cout << fmt::format("{:<26} {:<28} {:>44}  {:>7}  {}\n", "scenario", "metric", "per configuration", "ratio", "goal");
  std::string json = fmt::format("{{\"bench\":\"scenarios\",\"scale\":\"{}\",\"rows\":[", s.smoke ? "smoke" : "full");
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
  std::cout << json << "]}\n";
}

}  // namespace

int main(int argc, char** argv) {
  scale s;
  std::string which = "all";
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--scale" && i + 1 < argc) s.smoke = std::strcmp(argv[++i], "smoke") == 0;
    else if (a == "--scenario" && i + 1 < argc) which = argv[++i];
    else {
      std::cerr << "usage: bench_scenarios [--scale smoke|full] [--scenario 1|2|3|4|all]\n";
      return 2;
    }
  }
  if (s.smoke) s.kv_tokens = 8192, s.max_model_len = 4096;
  try {
    std::vector<row> rows;
    auto add = [&](std::vector<row> more) { rows.insert(rows.end(), more.begin(), more.end()); };
    if (which == "all" || which == "1") add(warm_follow_up(s));
    if (which == "all" || which == "2") add(tool_call_in_long_load(s));
    if (which == "all" || which == "3") add(cold_among_chatty(s));
    if (which == "all" || which == "4") add(agents_with_tool_gaps(s));
    print(rows, s);
  } catch (const std::exception& e) {
    std::cerr << "bench_scenarios: " << e.what() << "\n";
    return 1;
  }
  return 0;
}
