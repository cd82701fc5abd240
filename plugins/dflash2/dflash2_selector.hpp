#pragma once
// The DFlash2 candidate selector (ARCHITECTURE.md, "Candidate selector"): each slot's draft
// is the best of its top_k logits rescored by a low-rank bigram term with the token drafted
// before it. With selector.proj = 0 it is plain argmax.
#include <cstdint>
#include <vector>

namespace tandem::dflash2 {

struct selector_input {
  const float* logits = nullptr;    // [slots, vocab]
  const float* g = nullptr;         // [slots, rank]: selector.proj · z_k
  const float* codebook = nullptr;  // [vocab, rank]
  int64_t vocab = 0;
  int rank = 0;
  int top_k = 0;
  int slots = 0;
};

// d_1 .. d_slots, starting from prev = anchor.
std::vector<int32_t> select_draft(const selector_input& in, int32_t anchor);

// The top_k ids of one row of logits, largest first, ties to the lower id; NaN ranks last.
std::vector<int32_t> top_candidates(const float* logits, int64_t vocab, int top_k);

}  // namespace tandem::dflash2
