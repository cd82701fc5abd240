#include "spec_control.hpp"

#include <algorithm>
#include <cmath>
#include <iterator>

namespace tandem {

namespace {

// A verdict keeps 3/4 of a sequence's history (its text can change within a few dozen
// tokens) and 19/20 of the engine-wide one (the prior of new sequences).
constexpr double seq_keep = 0.75, global_keep = 0.95;
// How many draft tokens' worth of evidence the engine-wide rate counts for in a sequence's.
constexpr double prior_tokens = 2;

}  // namespace

double step_cost_model::timings::least() const {
  const int n = std::min(count, window);
  return *std::min_element(last, last + n);
}

// The least of the recent timings: noise (other work on the machine, a graph recorded by
// the step) only ever adds to a step's time, and the window follows a cost that drifts (a
// context that grows).
void step_cost_model::record(int64_t rows, double seconds) {
  if (rows <= 0 || !(seconds >= 0)) return;
  timings& t = by_rows_[rows];
  t.last[t.count % window] = seconds;
  ++t.count;
  if (t.count >= trusted_after) trusted_[rows] = t.least();
}

bool step_cost_model::measured(int64_t rows) const { return trusted_.count(rows) > 0; }

int64_t step_cost_model::largest() const { return trusted_.empty() ? 0 : trusted_.rbegin()->first; }

double step_cost_model::seconds(int64_t rows) const {
  if (trusted_.empty()) return 0;
  const auto hi = trusted_.lower_bound(rows);
  if (hi != trusted_.end() && hi->first == rows) return hi->second;
  // Above every measured size: as costly as the largest (optimistic, so it gets tried and
  // measured); below every one: as the smallest.
  if (hi == trusted_.end()) return std::prev(hi)->second;
  if (hi == trusted_.begin()) return hi->second;
  const auto lo = std::prev(hi);
  const double f = static_cast<double>(rows - lo->first) / static_cast<double>(hi->first - lo->first);
  return lo->second + f * (hi->second - lo->second);
}

double draft_controller::expected_accepted(double a, int k) {
  double e = 0, p = 1;
  for (int i = 0; i < k; ++i) e += (p *= a);
  return e;
}

double draft_controller::acceptance(const draft_state& s) const {
  const double global = (global_accepted_ + 1) / (global_examined_ + 2);  // 1/2 before any evidence
  return (s.accepted + prior_tokens * global) / (s.examined + prior_tokens);
}

void draft_controller::begin_step(int64_t rows, int64_t samplers, int eligible) {
  rows_ = rows;
  tokens_ = static_cast<double>(samplers);
  base_timed_ = cost_.measured(rows);
  explored_ = false;
  left_ = std::max(eligible, 1);
  together_ = false;
}

int draft_controller::choose(draft_state& s, int room) {
  // This sequence and those after it in the step (counted down whatever is decided).
  const int with_rest = std::max(left_, 1);
  if (left_ > 0) --left_;
  if (room <= 0) return 0;
  if (!adaptive_) return room;
  // A step size never timed is timed first, without drafts, so that drafting is weighed
  // against what it would cost to not draft.
  if (!base_timed_ || tokens_ <= 0) return 0;
  const double a = acceptance(s);
  const double a_rest = (global_accepted_ + 1) / (global_examined_ + 2);
  // Step sizes above the largest timed one are taken to cost as much as it (so that they get
  // tried); one sequence per step may go there, or every one when they go there together.
  const int64_t known = cost_.largest();
  const int limit =
      explored_ && !together_ ? static_cast<int>(std::clamp<int64_t>(known - rows_, 0, room)) : room;
  int best = 0;
  bool best_together = false;
  double best_rate = tokens_ / cost_.seconds(rows_);
  for (int k = 1; k <= limit; ++k) {
    const double alone = (tokens_ + expected_accepted(a, k)) / cost_.seconds(rows_ + k);
    if (alone > best_rate) best = k, best_rate = alone, best_together = false;
    if (with_rest > 1) {
      const double all = (tokens_ + expected_accepted(a, k) + (with_rest - 1) * expected_accepted(a_rest, k)) /
                         cost_.seconds(rows_ + int64_t{with_rest} * k);
      if (all > best_rate) best = k, best_rate = all, best_together = true;
    }
  }
  if (best > 0) {
    if (best_together) together_ = true;
    if (rows_ + best > known) explored_ = true;
    s.idle = 0;
    probe_every_ = min_probe_every;
    s.probing = false;
    return best;
  }
  if (s.probing) {  // the last probe did not make drafting worth it: every sequence waits longer
    s.probing = false;
    probe_every_ = std::min(2 * probe_every_, max_probe_every);
  }
  if (++s.idle < std::max(probe_every_, probe_floor())) return 0;
  s.idle = 0;
  s.probing = true;
  return probe_length(room);
}

// A probe drafts one token, or as many as cost about the same as one by the timed (or
// interpolated) sizes (a GPU verifies up to 16 rows in about the time of 2): they tell more
// of the text and, where it turned predictable, already pay.
int draft_controller::probe_length(int room) const {
  const double one = cost_.seconds(rows_ + 1);
  int k = 1;
  while (k < room && rows_ + k + 1 <= cost_.largest() && cost_.seconds(rows_ + k + 1) <= 1.05 * one) ++k;
  return k;
}

// A probe's extra cost is a step of one more row (the drafter's pass included, as the
// step times are taken) against the step as planned; spaced so that it stays within
// probe_budget of the decode time between probes. On a GPU at batch 1 a dflash2 probe costs
// 2.8 plain steps (session 15: 2.07 ms against 0.74), so it waits 36 steps, not 16.
int draft_controller::probe_floor() const {
  const double base = cost_.seconds(rows_), extra = cost_.seconds(rows_ + 1) - base;
  if (base <= 0 || extra <= 0) return min_probe_every;
  const double steps = std::ceil(extra / (probe_budget * base));
  return static_cast<int>(std::clamp(steps, double{min_probe_every}, double{max_probe_every}));
}

void draft_controller::planned(draft_state& s, int n) {
  if (n <= 0) {
    // A probe the drafter had nothing for told nothing: probe again next step.
    if (s.probing) s.probing = false, s.idle = probe_every_ - 1;
    return;
  }
  rows_ += n;
  tokens_ += expected_accepted(acceptance(s), n);
}

void draft_controller::shortened(draft_state& s, int asked, int n) {
  if (n >= asked) return;
  rows_ -= asked - n;
  tokens_ -= expected_accepted(acceptance(s), asked) - expected_accepted(acceptance(s), std::max(n, 0));
  if (n <= 0) planned(s, 0);  // what an empty draft tells (a probe's)
}

void draft_controller::forget_acceptance() {
  global_accepted_ = global_examined_ = 0;
  probe_every_ = min_probe_every;
}

void draft_controller::observe(draft_state& s, int proposed, int accepted) {
  if (proposed <= 0) return;
  // Tokens examined: every accepted one and the first rejected one (the rest never got a say).
  const double examined = accepted + (accepted < proposed ? 1 : 0);
  s.accepted = seq_keep * s.accepted + accepted;
  s.examined = seq_keep * s.examined + examined;
  global_accepted_ = global_keep * global_accepted_ + accepted;
  global_examined_ = global_keep * global_examined_ + examined;
}

}  // namespace tandem
