#pragma once
// The four scenarios of issue 5, each run under several configurations in one process.
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "driver.hpp"
#include "tandem/runtime.hpp"

namespace tandem::bench {

// Where the scenarios run: the backend, the pipeline they start from and the model file.
struct target {
  std::string backend;   // cpu | cuda; empty: cpu, or what --pipeline says
  std::string pipeline;  // one base pipeline for every configuration (the scheduler is set on it)
  std::string model;     // a model file or manifest name; empty: the pipeline's
  std::vector<std::string> overrides;  // --set, applied last
};

// Every size the scenarios use, for one scale (smoke, full, h200: see scale_named()).
struct scale {
  std::string name = "full";
  // Engine and scheduler knobs shared by every scenario.
  int64_t page_tokens = 256, budget = 256, late_cap = 64, max_batch = 8;
  double max_wait_ms = 1500;
  int64_t kv_tokens = 16384, max_model_len = 12288;
  bool warm_up = false;  // one small request through each engine before timing (first-use costs)

  struct s1_sizes {  // warm follow-up behind a generation and a queued cold document
    int64_t session = 1500, doc = 2400, generation = 200;
    double cold_after_s = 0.2, warm_after_s = 0.4;
  } s1;
  struct s2_sizes {  // a tool call during a long cold load
    int64_t doc = 4000, tool = 48;
    double tool_at_s = 1.0;
    int tool_after_steps = 0;  // ... and not before the load has run this many steps
  } s2;
  struct s3_sizes {  // a cold prompt among chatty sessions
    std::vector<int> sessions = {2, 4};
    int turns = 8;
    int64_t reply = 24, cold = 1600;
    double cold_at_s = 1.0;
  } s3;
  struct s4_sizes {  // four agents with tool gaps and background load
    int64_t system = 600, tool_result = 64, reply = 16, doc = 600;
    int64_t kv_tokens = 8192;  // the pool: the four sessions fit inside the default retention share
    int turns = 4;
    int docs = 8;         // background documents during the tool gaps, one every doc_every_s
    int flush_docs = 15;  // ... and during the long tool call before the re-read (> the pool)
    double gap_s = 2.5, first_doc_s = 0.3, doc_every_s = 0.5;
  } s4;
};

// "smoke" | "full" | "h200"; throws on anything else.
scale scale_named(const std::string& name);

// One configuration: which scheduler and which retention policy.
struct config_run {
  std::string name;       // "fcfs", "warm_bypass+session", ...
  std::string scheduler;  // fcfs | warm_bypass
  std::string retention = "lru";
};

// A measured quantity under each configuration, and how to read the ratio.
struct row {
  std::string scenario, metric, unit;
  std::vector<std::pair<std::string, double>> values;  // config name -> value
  std::string ratio_of;  // "a/b" names of the two configs whose ratio is reported
  std::string goal;
};

// What a scenario run needs to know besides its sizes.
struct context {
  scale s;
  target t;
  std::vector<config_run> schedulers;  // scenarios 1-3: one per scheduler
  std::vector<config_run> agents;      // scenario 4: every scheduler x retention pair
};

// Opens the pipeline for `c` on the context's target with the scale's knobs (and `extra`
// overrides after them), warmed up when the scale asks for it.
std::unique_ptr<runtime> open_runtime(const context& x, const config_run& c, std::vector<std::string> extra = {});

std::vector<row> warm_follow_up(const context& x);          // scenario 1
std::vector<row> tool_call_in_long_load(const context& x);  // scenario 2
std::vector<row> cold_among_chatty(const context& x);       // scenario 3
std::vector<row> agents_with_tool_gaps(const context& x);   // scenario 4

}  // namespace tandem::bench
