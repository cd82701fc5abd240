#pragma once
// The DFlash2 candidate selector (ARCHITECTURE.md, "Candidate selector"): each slot's draft
// is the best of its top_k logits rescored by a low-rank bigram term with the token drafted
// before it. With selector.proj = 0 it is plain argmax. The candidates come from the
// backend's top_k (largest first, ties to the lower id, NaN as -inf).
#include <cstdint>
#include <vector>

namespace tandem::dflash2 {

struct selector_input {
  const int32_t* candidates = nullptr;  // [slots, top_k]: the top_k ids of logits_k
  const float* logits = nullptr;        // [slots, top_k]: their logits
  int top_k = 0;
  const float* g = nullptr;             // [slots, rank]: selector.proj · z_k
  const float* codebook = nullptr;      // [vocab, rank]
  int rank = 0;
  int slots = 0;
};

// d_1 .. d_slots, starting from prev = anchor.
std::vector<int32_t> select_draft(const selector_input& in, int32_t anchor);

}  // namespace tandem::dflash2
