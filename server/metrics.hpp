#pragma once
// server_metrics: counters and histograms for GET /metrics, in Prometheus text format with
// vLLM's names under the prefix `tandem:` (so dashboards built for vLLM read them).
// Every method may be called from any thread.
#include <cstdint>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <vector>

#include "completion_source.hpp"

namespace tandem::http {

class histogram {
 public:
  explicit histogram(std::vector<double> bounds);
  void observe(double v);
  // Appends the _bucket, _sum and _count lines of `name` with `labels` ("k=\"v\"").
  void render(std::string& out, std::string_view name, std::string_view labels) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative; last one is +Inf
  double sum_ = 0;
  uint64_t count_ = 0;
};

// What the HTTP layer holds right now (server_context), for the leak gauges.
struct http_gauges {
  size_t connections = 0;  // open connections (http_sessions)
  size_t in_flight = 0;    // engine requests submitted by HTTP requests and not yet finished
};

class server_metrics {
 public:
  server_metrics();

  void add_prompt_tokens(uint64_t n);
  void add_generation_tokens(uint64_t n);
  void observe_ttft(double s);
  void observe_inter_token(double s);
  // One generated token, and its gap to the previous one (< 0: the first): both counters
  // under one lock, as the I/O threads record every token.
  void add_generated_token(double inter_token_s);
  void observe_e2e(double s);
  void observe_queue(double s);
  // TTFT and queue time of a request admitted as `cls` (warm | cold); queue < 0 = unknown.
  void observe_class(std::string_view cls, double ttft, double queue);
  // A finished engine request; reason is stop | length | abort | error.
  void count_finished(std::string_view reason);
  void count_http(int status);

  std::string render(const std::string& model, const source_stats& st, const http_gauges& http) const;

 private:
  mutable std::mutex mu_;
  uint64_t prompt_tokens_ = 0, generation_tokens_ = 0;
  std::map<std::string, uint64_t, std::less<>> finished_;
  std::map<int, uint64_t> http_;
  histogram ttft_, itl_, e2e_, queue_;
  std::map<std::string, histogram, std::less<>> class_ttft_, class_queue_;
};

}  // namespace tandem::http
