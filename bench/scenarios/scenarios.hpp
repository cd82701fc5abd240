#pragma once
// The four scenarios of issue 5, each run under several configurations in one process.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver.hpp"
#include "tandem/runtime.hpp"

namespace tandem::bench {

struct scale {
  bool smoke = false;
  int64_t page_tokens = 256, budget = 256, late_cap = 64;
  double max_wait_ms = 1500;
  int64_t kv_tokens = 16384, max_model_len = 12288;
};

// One configuration: which pipeline file (scheduler) and which retention policy.
struct config_run {
  std::string name;      // "fcfs", "warm_bypass", "warm_bypass+session", ...
  std::string pipeline;  // file under pipelines/
  std::string retention = "lru";
};

// A measured quantity under each configuration, and how to read the ratio.
struct row {
  std::string scenario, metric, unit;
  std::vector<std::pair<std::string, double>> values;  // config name -> value
  std::string ratio_of;  // "a/b" names of the two configs whose ratio is reported
  std::string goal;
};

// Opens the pipeline of `c` with the scale's knobs.
std::unique_ptr<runtime> open_runtime(const scale& s, const config_run& c, std::vector<std::string> extra = {});

std::vector<row> warm_follow_up(const scale& s);       // scenario 1
std::vector<row> tool_call_in_long_load(const scale& s);  // scenario 2
std::vector<row> cold_among_chatty(const scale& s);    // scenario 3
std::vector<row> agents_with_tool_gaps(const scale& s);  // scenario 4

}  // namespace tandem::bench
