#include "driver.hpp"

#include <random>
#include <stdexcept>
#include <thread>

namespace tandem::bench {

std::vector<int32_t> fresh_tokens(uint64_t seed, int64_t n) {
  std::mt19937_64 rng(seed * 0x9e3779b97f4a7c15ull + 1);
  std::vector<int32_t> t(static_cast<size_t>(n));
  for (auto& x : t) x = 200 + static_cast<int32_t>(rng() % 40000);
  return t;
}

int driver::plan(planned p) {
  plans_.push_back(std::move(p));
  out_.emplace_back();
  submitted_.push_back(false);
  finished_.push_back(false);
  return static_cast<int>(plans_.size() - 1);
}

double driver::elapsed() const {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0_).count();
}

bool driver::ready(size_t i, double now) const {
  const planned& p = plans_[i];
  if (steps_ < p.min_steps) return false;
  for (int a : p.also_after)
    if (!finished_.at(static_cast<size_t>(a))) return false;
  if (p.after < 0) return now >= p.at_s;
  const auto a = static_cast<size_t>(p.after);
  return finished_[a] && now >= out_[a].end_s + p.gap_s;
}

void driver::submit(size_t i) {
  outcome& o = out_[i];
  o.prompt = plans_[i].prompt();
  generation_request r;
  r.prompt = o.prompt;
  r.max_new_tokens = plans_[i].max_new;
  r.ignore_eos = true;
  r.session = plans_[i].session;
  r.on_event = [this, i](const token_event& ev) {
    outcome& o = out_[i];
    const double t = elapsed();
    if (ev.token >= 0) {
      if (o.first_s < 0) {
        o.first_s = t;
        o.cached = ev.cached_tokens;
        o.cls = ev.cls;
      }
      o.output.push_back(ev.token);
      o.token_s.push_back(t);
    }
    if (ev.finished != finish_reason::none) {
      if (ev.finished == finish_reason::error || ev.finished == finish_reason::cancelled)
        failure_ = "request '" + plans_[i].tag + "' ended with " + std::string(name(ev.finished)) + ": " + ev.error;
      o.end_s = t;
      finished_[i] = true;
    }
  };
  o.submit_s = elapsed();
  submitted_[i] = true;
  eng_.submit(std::move(r));
}

void driver::run(double limit_s) {
  t0_ = std::chrono::steady_clock::now();
  for (;;) {
    const double now = elapsed();
    bool all = true;
    for (size_t i = 0; i < plans_.size(); ++i) {
      if (!submitted_[i] && ready(i, now)) submit(i);
      all = all && finished_[i];
    }
    if (!failure_.empty()) throw std::runtime_error(failure_);
    if (all) return;
    if (now > limit_s) throw std::runtime_error("scenario did not finish in time");
    if (eng_.step()) ++steps_;
    else std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
}

}  // namespace tandem::bench
