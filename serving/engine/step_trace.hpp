#pragma once
// What one engine step did and where its wall time went (engine_run.cpp fills it). The
// engine adds every record to engine_stats; with a trace open (TANDEM_SPEC_TRACE=FILE at
// engine start, or engine::set_trace) it also appends it to the file as one JSON line, so a
// run can be read step by step: which steps drafted, what they cost, which phase took the
// time, and what the adaptive draft length's cost model believed when it planned the step.
//
//   {"step":12,"kind":"draft","rows":8,"seqs":1,"eligible":1,"asked":7,"drafted":7,"accepted":0,"took_s":0.0031,
//    "propose_s":..,"forward_s":..,"sample_s":..,"verify_s":..,"observe_s":..,
//    "cost_s":0.0009,"cost_base_s":0.0008,"cost_largest":8}
#include <cstdint>
#include <cstdio>
#include <string>
#include <string_view>

namespace tandem {

struct engine_stats;

// decode: every scheduled sequence computes its one new token and no draft; draft: the same,
// with at least one draft token; other: any prompt chunk (or recomputation after preemption)
// in the step, drafts or not. Only decode and draft steps time the cost model: a prompt
// chunk's rows cost what a prefill costs, not what as many verify rows do.
enum class step_kind : uint8_t { decode, draft, other };
std::string_view name(step_kind k);

struct step_record {
  uint64_t step = 0;
  step_kind kind = step_kind::other;
  int64_t rows = 0;      // token rows computed (step_plan::n_tokens(), drafts included)
  int64_t seqs = 0;      // sequences scheduled
  int64_t drafted = 0, accepted = 0;  // draft tokens verified and accepted, over the sequences
  // Sequences that could draft, and the draft tokens the adaptive length asked the drafter
  // for (asked > drafted: the drafter returned shorter drafts).
  int64_t eligible = 0, asked = 0;
  // Wall seconds: the whole step, and its phases: propose_drafts (the controller and the
  // drafter's propose calls), model->forward (on a GPU: enqueueing the step), sampling (on a
  // GPU: waiting for the step to finish), verification on the host (with any logits copied
  // back for host-side sampling), observe_committed (the drafter's observe calls). The rest
  // is plan building, publishing pages and emitting events.
  double took_s = 0, propose_s = 0, forward_s = 0, sample_s = 0, verify_s = 0, observe_s = 0;
  // The cost model before this step was added to it: its estimate for the step's rows and
  // for its rows less the drafts (0 while nothing is timed), and the largest row count it had
  // timed (sizes above it are taken as costing as much, so that they get tried).
  double cost_s = 0, cost_base_s = 0;
  int64_t cost_largest = 0;
};

// Adds r to the step counters and phase times of s.
void add_step(engine_stats& s, const step_record& r);

class step_trace {
 public:
  step_trace() = default;
  ~step_trace() { close(); }
  step_trace(const step_trace&) = delete;
  step_trace& operator=(const step_trace&) = delete;

  // Appends to `path` from now on (an earlier file is closed); "" only closes. Throws
  // tandem::error naming the path and the reason when it cannot be opened.
  void open(const std::string& path);
  void close();
  bool on() const { return file_ != nullptr; }
  // One JSON line, flushed at once: a run that is cut short leaves whole lines. The write is
  // not in the step's took_s (it happens after the step is timed).
  void write(const step_record& r);

 private:
  std::FILE* file_ = nullptr;
};

}  // namespace tandem
