#include "grammar_sampling.hpp"

#include <cmath>
#include <vector>

#include "logit_processing.hpp"
#include "tandem/error.hpp"
#include "tandem_ref/sampling.hpp"

namespace tandem {

void apply_grammar_mask(float* row, int vocab, std::span<const uint32_t> words) {
  for (int w = 0; w * 32 < vocab; ++w) {
    const uint32_t bits = words[static_cast<size_t>(w)];
    if (bits == ~0u) continue;  // the common case inside strings: every token of the word allowed
    const int end = std::min(vocab, (w + 1) * 32);
    for (int t = w * 32; t < end; ++t)
      if (!((bits >> (t - w * 32)) & 1u)) row[t] = -INFINITY;
  }
}

int32_t sample_with_grammar(const float* logits, int vocab, const generation_request& r, const sampling_params& p,
                            std::span<const int32_t> generated, grammar_matcher& m) {
  std::vector<float> row(logits, logits + vocab);
  apply_penalties(row, r, generated);
  thread_local std::vector<uint32_t> words;
  words.assign(grammar_matcher::mask_words(vocab), 0);
  m.fill_mask(words);
  apply_grammar_mask(row.data(), vocab, words);
  const int32_t tok = ref::sample_row(row.data(), vocab, p);
  if (tok < 0 || tok >= vocab || !std::isfinite(row[static_cast<size_t>(tok)]) || !m.accept(tok))
    throw error("grammar-constrained sampling found no token the grammar allows");
  return tok;
}

}  // namespace tandem
