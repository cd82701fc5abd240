#pragma once
// drafter: proposes tokens that the target model then verifies in one forward pass
// (speculative decoding).
//
//   auto d = host.create<drafter>("drafter.ngram", cfg);
//   auto draft = d->propose(seq_id, {.tokens = tokens, .prompt_len = n, .max_draft = 7});
//   ... the engine verifies ...; d->accepted(seq_id, draft.size(), n_ok);
//   d->release(seq_id, output);   // the request finished
//
// The engine asks each running decode sequence for a draft every step (unless the batch is
// larger than limits().disable_above_batch, the request turned speculation off, or the
// adaptive control found drafting not worth its cost for that sequence), appends
// the draft to the sequence's step-plan row and keeps the longest prefix the target agrees
// with, plus the target's own next token. Drafters here are deterministic: a draft is a
// point mass, so verification needs no draft probabilities.
//
// Drafters conditioned on the target (DFlash2, MTP) would read the target's last hidden
// states, which needs_hidden_states() asks for; the engine does not supply them yet and the
// runtime refuses such a drafter with a clear error.
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

struct draft_context {
  std::span<const int32_t> tokens;  // the sequence so far (prompt + accepted output)
  int64_t prompt_len = 0;           // tokens[0, prompt_len) is the prompt
  tensor_view hidden;               // [n, hidden] target states of the newest tokens; may be empty
  int max_draft = 0;                // propose at most this many
};

// The engine's part of a drafter's settings.
struct draft_limits {
  int max_draft = 0;            // k, vLLM's num_speculative_tokens
  int disable_above_batch = 0;  // no drafts in a step of more sequences than this; 0 = never off
  // The engine picks each sequence's draft length (0..k) from its measured acceptance and
  // step times (core/src/engine/spec_control.hpp); false = always ask for up to k.
  bool adaptive = true;
};

class TANDEM_API drafter : public plugin_object {
 public:
  ~drafter() override;
  virtual draft_limits limits() const = 0;
  // Up to ctx.max_draft proposed continuation tokens (possibly none).
  virtual std::vector<int32_t> propose(uint64_t seq_id, const draft_context& ctx) = 0;
  // Feedback after verification: the first n_accepted of n_proposed were accepted.
  virtual void accepted(uint64_t seq_id, int n_proposed, int n_accepted) {
    (void)seq_id, (void)n_proposed, (void)n_accepted;
  }
  // The sequence is finished (or cancelled); drop its state. `output` is every token it
  // generated (drafters that learn from finished outputs keep it).
  virtual void release(uint64_t seq_id, std::span<const int32_t> output) { (void)seq_id, (void)output; }
  virtual bool needs_hidden_states() const { return false; }
};

}  // namespace tandem
