#include "dflash2_selector.hpp"

#include <cstddef>

namespace tandem::dflash2 {

std::vector<int32_t> select_draft(const selector_input& in, int32_t anchor) {
  std::vector<int32_t> draft;
  std::vector<float> weighted(static_cast<size_t>(in.rank));  // codebook[prev] * g_k
  int32_t prev = anchor;
  for (int k = 0; k < in.slots; ++k) {
    const float* g = in.g + static_cast<int64_t>(k) * in.rank;
    const float* cp = in.codebook + static_cast<int64_t>(prev) * in.rank;
    for (int r = 0; r < in.rank; ++r) weighted[static_cast<size_t>(r)] = cp[r] * g[r];
    int32_t best = -1;
    float best_score = 0;
    for (int j = 0; j < in.top_k; ++j) {
      const int32_t c = in.candidates[static_cast<int64_t>(k) * in.top_k + j];
      const float* cc = in.codebook + static_cast<int64_t>(c) * in.rank;
      float bigram = 0;
      for (int r = 0; r < in.rank; ++r) bigram += weighted[static_cast<size_t>(r)] * cc[r];
      const float score = in.logits[static_cast<int64_t>(k) * in.top_k + j] + bigram;
      // Ties (and a NaN score, which compares false) keep the lower id.
      if (best < 0 || score > best_score || (score == best_score && c < best)) best = c, best_score = score;
    }
    draft.push_back(best);
    prev = best;
  }
  return draft;
}

}  // namespace tandem::dflash2
