#pragma once
// Adaptive draft length (issue 16): how many draft tokens each decoding sequence verifies
// this step. Drafting pays only when the tokens a draft is expected to add outweigh the
// extra rows' cost, and both depend on the machine and the text: on a GPU at batch 1 a few
// more rows are nearly free, on two CPU cores each costs about a third of a step; a count
// is predictable, prose is not. So neither is assumed, both are measured:
//
//   step_cost_model  the wall time of a decode step (every sequence computing its one new
//                    token, with or without a draft; a step with a prompt chunk costs what
//                    a prefill does and is never recorded) by the rows it computed: per row
//                    count the least of its last few timings, trusted from the second (a
//                    GPU's first step of a size also records its CUDA graph, and a shared
//                    machine's noise only ever adds); sizes not trusted yet are interpolated
//                    between neighbours, or taken as free above the largest trusted one so
//                    that larger drafts get tried;
//   draft_controller per sequence, a decayed count of its draft tokens accepted / examined
//                    (a new sequence starts from the engine-wide rate); each step it picks
//                    the k in [0, room] that maximises the step's expected tokens per second
//                    (greedily, sequence after sequence: the rows and expected tokens of
//                    those before are part of the step). k = 0 stops drafting for it; a
//                    stopped sequence re-probes now and then (every 16 eligible steps,
//                    doubling up to 256 while probes do not turn drafting back on; the
//                    interval is engine-wide, and never so short that probes cost more
//                    than probe_budget of the time), since text changes (a list starts
//                    inside prose). A probe drafts one token, or as many as the timed
//                    sizes say cost about the same (a GPU: the whole block), since those
//                    tell more and already pay where the text turned predictable. In a batch each k is also weighed as every
//                    sequence still to be asked drafting k (at the engine-wide acceptance):
//                    a drafter's fixed cost per step (drafter.dflash2 drafts a batch in one
//                    pass) and a verify step that costs nearly the same at 15 rows as at 64
//                    can make one draft a loss and eight a gain. Sizes above
//                    the largest timed one are explored by one sequence per step only, so a
//                    batch does not pay for eight guesses at once.
//
// Expected tokens of a k-token draft under a per-token acceptance a (each token accepted
// only after the one before it): E(k) = a + a^2 + ... + a^k accepted, plus the target's own.
//
//   draft_controller c(true);
//   c.begin_step(rows, samplers, eligible);   // the step's rows, sampled sequences, those that may draft
//   int k = c.choose(s.draft, room);          // ask the drafter for at most k tokens
//   c.planned(s.draft, draft.size());         // it returned that many: the step grows
//   (batched drafter: c.planned(s.draft, k) at once, then c.shortened(s.draft, k, n) if n < k)
//   ... forward, verify ...
//   c.observe(s.draft, proposed, accepted);
//   c.record_step(rows, seconds);             // decode steps only
#include <cstdint>
#include <map>

namespace tandem {

class step_cost_model {
 public:
  // The timings kept per row count, and how many make a size trusted.
  static constexpr int window = 8, trusted_after = 2;

  void record(int64_t rows, double seconds);
  bool measured(int64_t rows) const;
  // Seconds of a step of `rows` rows; 0 before any size is trusted.
  double seconds(int64_t rows) const;
  // The largest trusted row count (0: none).
  int64_t largest() const;

 private:
  struct timings {
    double last[window] = {};
    int count = 0;  // recorded so far (the window holds the last `window`)
    double least() const;
  };
  std::map<int64_t, timings> by_rows_;
  std::map<int64_t, double> trusted_;  // rows -> least recent seconds, sizes timed trusted_after times or more
};

// One sequence's part of the controller (lives in the engine's sequence).
struct draft_state {
  double accepted = 0, examined = 0;  // decayed counts of draft tokens
  int idle = 0;                       // eligible steps without a draft since the last one
  bool probing = false;               // the current draft is a probe
};

class draft_controller {
 public:
  explicit draft_controller(bool adaptive) : adaptive_(adaptive) {}
  bool adaptive() const { return adaptive_; }

  // `eligible`: how many sequences of the step may draft (choose() is asked once for each).
  void begin_step(int64_t rows, int64_t samplers, int eligible = 1);
  // The most draft tokens to ask for this step (0: none), at most `room`.
  int choose(draft_state& s, int room);
  // The drafter returned `n` tokens for the sequence `choose` was asked about.
  void planned(draft_state& s, int n);
  // A draft planned at `asked` tokens before the drafter returned it (a batched drafter)
  // came back with n < asked: the step shrinks back.
  void shortened(draft_state& s, int asked, int n);
  void observe(draft_state& s, int proposed, int accepted);
  void record_step(int64_t rows, double seconds) { cost_.record(rows, seconds); }
  // Back to a new engine's engine-wide acceptance (1/2) and probe interval, the step times
  // kept: after a benchmark's warm-up, which should teach the machine, not the text.
  void forget_acceptance();

  // The per-token acceptance the controller assumes for s now.
  double acceptance(const draft_state& s) const;
  // a + a^2 + ... + a^k.
  static double expected_accepted(double a, int k);
  const step_cost_model& cost() const { return cost_; }

  // Eligible steps between a stopped sequence's probes: engine-wide (the requests of one
  // workload tend to be alike, so a batch of prose backs off together rather than each
  // sequence paying its own first probes).
  int probe_every() const { return probe_every_; }
  static constexpr int min_probe_every = 16, max_probe_every = 256;
  // The share of a stopped sequence's decode time its probes may cost: the interval is at
  // least a probe's measured extra cost over this share of a step (probe_floor()).
  static constexpr double probe_budget = 0.05;

 private:
  int probe_floor() const;  // the fewest eligible steps between probes the cost allows
  int probe_length(int room) const;  // draft tokens of a probe

  bool adaptive_;
  step_cost_model cost_;
  double global_accepted_ = 0, global_examined_ = 0;  // engine-wide, decayed
  int64_t rows_ = 0;                                  // of the step being planned
  double tokens_ = 0;                                 // expected tokens of it
  bool base_timed_ = false;                           // its size without drafts was timed
  bool explored_ = false;                             // a draft of it already goes past largest()
  int left_ = 0;                                      // eligible sequences not yet asked about
  bool together_ = false;                             // a draft was chosen as all of them drafting
  int probe_every_ = min_probe_every;
};

}  // namespace tandem
