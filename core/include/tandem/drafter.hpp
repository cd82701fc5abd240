#pragma once
// drafter: proposes tokens that the target model then verifies in one forward pass.
//
//   auto d = host.create<drafter>("drafter.ngram", cfg);
//   auto draft = d->propose(seq_id, {tokens, hidden, 7});
//   ... verify ...; d->accepted(seq_id, draft.size(), n_ok);
//
// Drafters conditioned on the target (DFlash2, MTP) read the target's last hidden states,
// which the engine passes when needs_hidden_states() is true.
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

struct draft_context {
  std::span<const int32_t> tokens;  // the sequence so far (prompt + accepted output)
  tensor_view hidden;               // [n, hidden] target states of the newest tokens; may be empty
  int max_draft = 0;                // propose at most this many
};

class TANDEM_API drafter : public plugin_object {
 public:
  ~drafter() override;
  // Up to ctx.max_draft proposed continuation tokens (possibly none).
  virtual std::vector<int32_t> propose(uint64_t seq_id, const draft_context& ctx) = 0;
  // Feedback after verification: the first n_accepted of n_proposed were accepted.
  virtual void accepted(uint64_t seq_id, int n_proposed, int n_accepted) {
    (void)seq_id, (void)n_proposed, (void)n_accepted;
  }
  // The sequence is finished; drop its state.
  virtual void release(uint64_t seq_id) { (void)seq_id; }
  virtual bool needs_hidden_states() const { return false; }
};

}  // namespace tandem
