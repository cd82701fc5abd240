#pragma once
// driver: plays a scripted workload against one engine in-process, on this thread.
//
// A planned request is submitted at a wall-clock offset, or `gap_s` after another planned
// request finished (multi-turn sessions, tool calls), and not before the engine has run
// `min_steps` steps (a speed-independent "while that load is under way"). Its prompt may be
// built from earlier requests' prompts and outputs when it is submitted. The driver steps the
// engine until every planned request has finished and records, per request, submit /
// first-token / finish times, token times and what the prefix cache supplied.
#include <chrono>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "tandem/engine.hpp"

namespace tandem::bench {

struct planned {
  std::string tag;                 // what the scenario measures it as ("warm", "cold", ...)
  double at_s = 0;                 // submit time when `after` < 0
  int after = -1;                  // index of a request that must finish first
  double gap_s = 0;                // ... and this long after it finished
  std::function<std::vector<int32_t>()> prompt;
  int64_t max_new = 8;
  std::string session;
  std::vector<int> also_after;     // more requests that must have finished first
  int64_t min_steps = 0;           // ... and the engine has run at least this many steps
};

struct outcome {
  std::vector<int32_t> prompt, output;
  double submit_s = -1, first_s = -1, end_s = -1;
  std::vector<double> token_s;
  int64_t cached = 0;              // prompt tokens the cache supplied at admission
  request_class cls = request_class::unknown;
  double ttft() const { return first_s - submit_s; }
};

class driver {
 public:
  explicit driver(engine& eng) : eng_(eng) {}
  // Index of the new planned request.
  int plan(planned p);
  // Runs until every planned request finished (or `limit_s` passed: throws).
  void run(double limit_s = 600);
  const outcome& result(int i) const { return out_.at(static_cast<size_t>(i)); }
  const std::vector<planned>& plans() const { return plans_; }
  size_t size() const { return plans_.size(); }
  double elapsed() const;
  int64_t steps() const { return steps_; }  // engine steps that did work during run()

 private:
  bool ready(size_t i, double now) const;
  void submit(size_t i);

  engine& eng_;
  std::vector<planned> plans_;
  std::vector<outcome> out_;
  std::vector<bool> submitted_, finished_;
  std::chrono::steady_clock::time_point t0_;
  int64_t steps_ = 0;
  std::string failure_;  // set by the engine's callback (which must not throw)
};

// Tokens that make a prompt nobody has sent before (ids from the ordinary vocabulary).
std::vector<int32_t> fresh_tokens(uint64_t seed, int64_t n);

}  // namespace tandem::bench
