#include "dflash2_selector.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <limits>
#include <numeric>

namespace tandem::dflash2 {

std::vector<int32_t> top_candidates(const float* logits, int64_t vocab, int top_k) {
  // NaN breaks a strict weak order (and with it std::nth_element): it ranks below -inf.
  const auto key = [&](int32_t c) {
    const float x = logits[c];
    return std::isnan(x) ? -std::numeric_limits<float>::infinity() : x;
  };
  const auto before = [&](int32_t a, int32_t b) {
    const float ka = key(a), kb = key(b);
    return ka > kb || (ka == kb && a < b);
  };
  std::vector<int32_t> ids(static_cast<size_t>(vocab));
  std::iota(ids.begin(), ids.end(), 0);
  const auto k = static_cast<std::ptrdiff_t>(std::min<int64_t>(top_k, vocab));
  std::nth_element(ids.begin(), ids.begin() + (k - 1), ids.end(), before);
  ids.resize(static_cast<size_t>(k));
  std::sort(ids.begin(), ids.end(), before);
  return ids;
}

std::vector<int32_t> select_draft(const selector_input& in, int32_t anchor) {
  std::vector<int32_t> draft;
  std::vector<float> weighted(static_cast<size_t>(in.rank));  // codebook[prev] * g_k
  int32_t prev = anchor;
  for (int k = 0; k < in.slots; ++k) {
    const float* logits = in.logits + static_cast<int64_t>(k) * in.vocab;
    const float* g = in.g + static_cast<int64_t>(k) * in.rank;
    const float* cp = in.codebook + static_cast<int64_t>(prev) * in.rank;
    for (int r = 0; r < in.rank; ++r) weighted[static_cast<size_t>(r)] = cp[r] * g[r];
    int32_t best = -1;
    float best_score = 0;
    for (int32_t c : top_candidates(logits, in.vocab, in.top_k)) {
      const float* cc = in.codebook + static_cast<int64_t>(c) * in.rank;
      float bigram = 0;
      for (int r = 0; r < in.rank; ++r) bigram += weighted[static_cast<size_t>(r)] * cc[r];
      const float score = logits[c] + bigram;
      // Ties (and a NaN score, which compares false) keep the lower id.
      if (best < 0 || score > best_score || (score == best_score && c < best)) best = c, best_score = score;
    }
    draft.push_back(best);
    prev = best;
  }
  return draft;
}

}  // namespace tandem::dflash2
