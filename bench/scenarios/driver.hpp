#pragma once
// driver: plays a scripted workload against one engine in-process, on this thread.
//
// A planned request is submitted at a wall-clock offset, or `gap_s` after another planned
// request finished (multi-turn sessions, tool calls). Its prompt may be built from earlier
// requests' prompts and outputs when it is submitted. The driver steps the engine until every
// planned request has finished and records, per request, submit / first-token / finish times,
// token times and what the prefix cache supplied.
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

 private:
  bool ready(size_t i, double now) const;
  void submit(size_t i);

  engine& eng_;
  std::vector<planned> plans_;
  std::vector<outcome> out_;
  std::vector<bool> submitted_, finished_;
  std::chrono::steady_clock::time_point t0_;
  std::string failure_;  // set by the engine's callback (which must not throw)
};

// Tokens that make a prompt nobody has sent before (ids from the ordinary vocabulary).
std::vector<int32_t> fresh_tokens(uint64_t seed, int64_t n);

}  // namespace tandem::bench
