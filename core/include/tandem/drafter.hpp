#pragma once
// drafter: proposes tokens that the target model then verifies in one forward pass
// (speculative decoding).
//
//   auto d = host.create<drafter>("drafter.ngram", cfg);
//   auto draft = d->propose(seq_id, {.tokens = tokens, .prompt_len = n, .max_draft = 7});
//   auto drafts = d->propose_batch(requests);   // the engine: every drafting sequence at once
//   ... the engine verifies ...; d->accepted(seq_id, draft.size(), n_ok);
//   d->release(seq_id, output);   // the request finished
//
// The engine asks each running decode sequence for a draft every step (unless the batch is
// larger than limits().disable_above_batch, the request turned speculation off, or the
// adaptive control found drafting not worth its cost for that sequence) through
// propose_batch(): all of them in one call when limits().batched (a drafter that runs a
// network drafts them in one pass), else one call per sequence, and appends
// the draft to the sequence's step-plan row and keeps the longest prefix the target agrees
// with, plus the target's own next token. Drafters here are deterministic: a draft is a
// point mass, so verification needs no draft probabilities.
//
// A drafter conditioned on the target (DFlash2; later MTP) names the target layers it reads
// (target_layers()). The runtime then bind()s it to the target's backend, embedding table and
// output head, and after every forward pass the engine hands it the residual stream at those
// layers for each sequence's newly committed tokens (observe()): prompt chunks, plain decode
// tokens, and a verify step's accepted rows (never a rejected draft's).
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

class backend;
class linear_weight;

struct draft_context {
  std::span<const int32_t> tokens;  // the sequence so far (prompt + accepted output)
  int64_t prompt_len = 0;           // tokens[0, prompt_len) is the prompt
  int max_draft = 0;                // propose at most this many
};

// One sequence's part of a propose_batch() call.
struct draft_request {
  uint64_t seq_id = 0;
  draft_context ctx;
};

// What a drafter conditioned on the target shares with it (drafter::bind). The pointers stay
// valid while the drafter lives.
struct draft_target {
  backend* be = nullptr;                     // the target's backend: its device memory and ops
  const linear_weight* embedding = nullptr;  // the token embedding table {vocab, hidden}
  const linear_weight* lm_head = nullptr;    // the output head {vocab, hidden} (the table when tied)
  std::string arch;                          // model_info::arch
  int n_layers = 0;
  int64_t hidden = 0;
  int64_t vocab = 0;
};

// The engine's part of a drafter's settings.
struct draft_limits {
  int max_draft = 0;            // k, vLLM's num_speculative_tokens
  int disable_above_batch = 0;  // no drafts in a step of more sequences than this; 0 = never off
  // The engine picks each sequence's draft length (0..k) from its measured acceptance and
  // step times (serving/engine/spec_control.hpp); false = always ask for up to k.
  bool adaptive = true;
  // propose_batch() drafts several sequences for less than one propose() each (a network's
  // pass). The engine then asks for all of a step's drafts at once, and its adaptive
  // control plans each at the length asked for, before the drafter returns it (a draft that
  // comes back shorter leaves the choices after it as if it had not). false: the engine asks
  // one sequence at a time, each choice seeing the drafts before it at their real lengths.
  bool batched = false;
};

class TANDEM_API drafter : public plugin_object {
 public:
  ~drafter() override;
  virtual draft_limits limits() const = 0;
  // Up to ctx.max_draft proposed continuation tokens (possibly none).
  virtual std::vector<int32_t> propose(uint64_t seq_id, const draft_context& ctx) = 0;
  // propose() for several sequences (distinct seq_ids), drafts in the order of `reqs`; each
  // must be exactly what propose() alone would return. The default calls propose() for each;
  // a drafter whose per-call cost is fixed (a network's weights read, a device wait) does all
  // of them at once.
  virtual std::vector<std::vector<int32_t>> propose_batch(std::span<const draft_request> reqs);
  // Feedback after verification: the first n_accepted of n_proposed were accepted.
  virtual void accepted(uint64_t seq_id, int n_proposed, int n_accepted) {
    (void)seq_id, (void)n_proposed, (void)n_accepted;
  }
  // The sequence is finished (or cancelled); drop its state. `output` is every token it
  // generated (drafters that learn from finished outputs keep it).
  virtual void release(uint64_t seq_id, std::span<const int32_t> output) { (void)seq_id, (void)output; }

  // ---- Drafters conditioned on the target's hidden states. The defaults suit one that is not.

  // The target layers whose residual stream (after the layer's FFN, before the final norm;
  // Hugging Face's hidden_states[l + 1]) this drafter reads, in the order observe() passes
  // them; empty: none.
  virtual std::vector<int> target_layers() const { return {}; }
  // Once, before anything else, when target_layers() is not empty. config_error (naming the
  // drafter's setting) when the drafter cannot run with this target or backend.
  virtual void bind(const draft_target& target) { (void)target; }
  // The target's states for committed tokens [first_pos, first_pos + n) of a sequence:
  // taps[i] is [n, hidden] at target_layers()[i], in the backend's memory, valid during the
  // call only. first_pos at or before positions it already holds means those were recomputed
  // (after a preemption): it drops them and keeps the new ones. Positions never observed (a
  // prompt prefix served by the prefix cache) stay absent.
  virtual void observe(uint64_t seq_id, int64_t first_pos, std::span<const tensor_view> taps) {
    (void)seq_id, (void)first_pos, (void)taps;
  }
};

}  // namespace tandem
