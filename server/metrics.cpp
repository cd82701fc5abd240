#include "metrics.hpp"

#include <algorithm>
#include <fmt/format.h>

namespace tandem::http {
namespace {

// vLLM's bucket bounds (vllm/v1/metrics/loggers.py).
std::vector<double> ttft_buckets() {
  return {0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
          2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0};
}
std::vector<double> itl_buckets() {
  return {0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0};
}
std::vector<double> latency_buckets() {
  return {0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
          120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0};
}

std::string escape_label(std::string_view v) {
  std::string out;
  for (char c : v) {
    if (c == '\\' || c == '"') out += '\\';
    if (c == '\n') { out += "\\n"; continue; }
    out += c;
  }
  return out;
}

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void counter(std::string& out, std::string_view name, std::string_view help, std::string_view lab, uint64_t v) {
  header(out, name, "counter", help);
  out += fmt::format("{}{{{}}} {}\n", name, lab, v);
}

// Prefix cache and scheduling-policy counters of the engine.
void render_cache(std::string& out, std::string_view lab, const source_stats& st) {
  header(out, "tandem:kv_cache_cached_perc", "gauge", "Fraction of KV pool pages unreferenced but cached (0-1).");
  out += fmt::format("tandem:kv_cache_cached_perc{{{}}} {}\n", lab, st.kv_cached);
  counter(out, "tandem:prefix_cache_queries_total", "Prompt tokens looked up in the prefix cache at admission.", lab,
          st.prefix_queries);
  counter(out, "tandem:prefix_cache_hits_total", "Prompt tokens the prefix cache supplied.", lab, st.prefix_hits);
  counter(out, "tandem:scheduler_hold_events_total", "Waiting requests the scheduler started holding back.", lab,
          st.hold_events);
  counter(out, "tandem:scheduler_aging_escapes_total", "Held requests admitted because they waited too long.", lab,
          st.aging_escapes);
  counter(out, "tandem:scheduler_capped_steps_total", "Steps in which a cold prefill chunk was capped.", lab,
          st.capped_steps);
  counter(out, "tandem:kv_cache_evicted_pages_total", "Cached KV pages evicted for other content.", lab,
          st.pages_evicted);
}

// Speculative decoding, under the names vLLM's counters are exposed with (vllm:spec_decode_*
// plus the counter's _total, as the other counters here); the per-position counter has one
// series per draft position seen so far.
void render_spec(std::string& out, std::string_view lab, const source_stats& st) {
  counter(out, "tandem:spec_decode_num_drafts_total", "Sequences verified with at least one draft token.", lab,
          st.spec_drafts);
  counter(out, "tandem:spec_decode_num_draft_tokens_total", "Draft tokens proposed.", lab, st.spec_draft_tokens);
  counter(out, "tandem:spec_decode_num_accepted_tokens_total", "Draft tokens accepted.", lab, st.spec_accepted_tokens);
  header(out, "tandem:spec_decode_num_accepted_tokens_per_pos_total", "counter",
         "Drafts whose token at this position was accepted.");
  for (size_t i = 0; i < st.spec_accepted_per_pos.size(); ++i)
    out += fmt::format("tandem:spec_decode_num_accepted_tokens_per_pos_total{{{},position=\"{}\"}} {}\n", lab, i,
                       st.spec_accepted_per_pos[i]);
}

}  // namespace

histogram::histogram(std::vector<double> bounds) : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void histogram::observe(double v) {
  const auto it = std::lower_bound(bounds_.begin(), bounds_.end(), v);
  ++counts_[static_cast<size_t>(it - bounds_.begin())];
  sum_ += v;
  ++count_;
}

void histogram::render(std::string& out, std::string_view name, std::string_view labels) const {
  uint64_t cum = 0;
  for (size_t i = 0; i < bounds_.size(); ++i) {
    cum += counts_[i];
    out += fmt::format("{}_bucket{{{},le=\"{}\"}} {}\n", name, labels, bounds_[i], cum);
  }
  out += fmt::format("{}_bucket{{{},le=\"+Inf\"}} {}\n", name, labels, count_);
  out += fmt::format("{}_sum{{{}}} {}\n{}_count{{{}}} {}\n", name, labels, sum_, name, labels, count_);
}

server_metrics::server_metrics()
    : ttft_(ttft_buckets()), itl_(itl_buckets()), e2e_(latency_buckets()), queue_(latency_buckets()) {}

void server_metrics::add_prompt_tokens(uint64_t n) { std::lock_guard l(mu_); prompt_tokens_ += n; }
void server_metrics::add_generation_tokens(uint64_t n) { std::lock_guard l(mu_); generation_tokens_ += n; }
void server_metrics::observe_ttft(double s) { std::lock_guard l(mu_); ttft_.observe(s); }
void server_metrics::observe_inter_token(double s) { std::lock_guard l(mu_); itl_.observe(s); }
void server_metrics::add_generated_token(double inter_token_s) {
  std::lock_guard l(mu_);
  ++generation_tokens_;
  if (inter_token_s >= 0) itl_.observe(inter_token_s);
}
void server_metrics::observe_e2e(double s) { std::lock_guard l(mu_); e2e_.observe(s); }
void server_metrics::observe_queue(double s) { std::lock_guard l(mu_); queue_.observe(s); }
void server_metrics::count_http(int status) { std::lock_guard l(mu_); ++http_[status]; }

void server_metrics::observe_class(std::string_view cls, double ttft, double queue) {
  std::lock_guard l(mu_);
  auto at = [&](auto& map, std::vector<double> bounds) -> histogram& {
    auto it = map.find(cls);
    if (it == map.end()) it = map.emplace(std::string(cls), histogram(std::move(bounds))).first;
    return it->second;
  };
  at(class_ttft_, ttft_buckets()).observe(ttft);
  if (queue >= 0) at(class_queue_, latency_buckets()).observe(queue);
}

void server_metrics::count_finished(std::string_view reason) {
  std::lock_guard l(mu_);
  auto it = finished_.find(reason);
  if (it == finished_.end()) it = finished_.emplace(std::string(reason), 0).first;
  ++it->second;
}

std::string server_metrics::render(const std::string& model, const source_stats& st, const http_gauges& http) const {
  const std::string lab = fmt::format("model_name=\"{}\"", escape_label(model));
  std::string out;
  header(out, "tandem:num_requests_running", "gauge", "Requests in the engine's running batch.");
  out += fmt::format("tandem:num_requests_running{{{}}} {}\n", lab, st.running);
  header(out, "tandem:num_requests_waiting", "gauge", "Requests waiting to be scheduled.");
  out += fmt::format("tandem:num_requests_waiting{{{}}} {}\n", lab, st.waiting);
  header(out, "tandem:kv_cache_usage_perc", "gauge", "Fraction of KV pool pages in use (0-1).");
  out += fmt::format("tandem:kv_cache_usage_perc{{{}}} {}\n", lab, st.kv_usage);
  header(out, "tandem:num_preemptions_total", "counter", "Preemptions by the scheduler.");
  out += fmt::format("tandem:num_preemptions_total{{{}}} {}\n", lab, st.preemptions);
  render_cache(out, lab, st);
  render_spec(out, lab, st);

  std::lock_guard l(mu_);
  header(out, "tandem:prompt_tokens_total", "counter", "Prompt tokens of requests that started generating.");
  out += fmt::format("tandem:prompt_tokens_total{{{}}} {}\n", lab, prompt_tokens_);
  header(out, "tandem:generation_tokens_total", "counter", "Generated tokens.");
  out += fmt::format("tandem:generation_tokens_total{{{}}} {}\n", lab, generation_tokens_);
  header(out, "tandem:request_success_total", "counter", "Finished requests by finish reason.");
  for (const char* r : {"stop", "length", "abort"})
    if (!finished_.count(r)) out += fmt::format("tandem:request_success_total{{{},finished_reason=\"{}\"}} 0\n", lab, r);
  for (const auto& [r, n] : finished_)
    out += fmt::format("tandem:request_success_total{{{},finished_reason=\"{}\"}} {}\n", lab, r, n);
  header(out, "tandem:time_to_first_token_seconds", "histogram", "Time from arrival to the first token.");
  ttft_.render(out, "tandem:time_to_first_token_seconds", lab);
  header(out, "tandem:inter_token_latency_seconds", "histogram", "Time between consecutive tokens.");
  itl_.render(out, "tandem:inter_token_latency_seconds", lab);
  header(out, "tandem:e2e_request_latency_seconds", "histogram", "Time from arrival to the last token.");
  e2e_.render(out, "tandem:e2e_request_latency_seconds", lab);
  header(out, "tandem:request_queue_time_seconds", "histogram", "Time from submission to first scheduling.");
  queue_.render(out, "tandem:request_queue_time_seconds", lab);
  header(out, "tandem:class_time_to_first_token_seconds", "histogram",
         "Time to first token by the class a request was admitted as (warm | cold).");
  for (const auto& [c, h] : class_ttft_)
    h.render(out, "tandem:class_time_to_first_token_seconds", fmt::format("{},class=\"{}\"", lab, c));
  header(out, "tandem:class_request_queue_time_seconds", "histogram",
         "Time from submission to first scheduling by class (warm | cold).");
  for (const auto& [c, h] : class_queue_)
    h.render(out, "tandem:class_request_queue_time_seconds", fmt::format("{},class=\"{}\"", lab, c));
  // The HTTP layer's own state: after every client is done both return to 0 (the scrape's
  // own connection aside), so a leaked session or engine request shows here.
  header(out, "tandem:http_connections_open", "gauge", "Open HTTP connections.");
  out += fmt::format("tandem:http_connections_open {}\n", http.connections);
  header(out, "tandem:http_requests_in_flight", "gauge",
         "Engine requests submitted for HTTP requests and not yet finished (--max-pending bounds them).");
  out += fmt::format("tandem:http_requests_in_flight {}\n", http.in_flight);
  header(out, "tandem:http_requests_total", "counter", "HTTP responses by status.");
  for (const auto& [s, n] : http_) out += fmt::format("tandem:http_requests_total{{status=\"{}\"}} {}\n", s, n);
  return out;
}

}  // namespace tandem::http
