#include "ngram_drafter.hpp"

#include <algorithm>
#include <string>

#include "tandem/error.hpp"

namespace tandem {

ngram_settings ngram_settings::from(const config& cfg) {
  ngram_settings s;
  s.min_n = static_cast<int>(cfg.get_int("min_n"));
  s.max_n = static_cast<int>(cfg.get_int("max_n"));
  s.k = static_cast<int>(cfg.get_int("k"));
  s.disable_above_batch = static_cast<int>(cfg.get_int("disable_above_batch"));
  s.adaptive = cfg.get_bool("adaptive");
  if (s.min_n > s.max_n)
    throw config_error("drafter.min_n", "min_n (" + std::to_string(s.min_n) + ") must not exceed max_n (" +
                                            std::to_string(s.max_n) + ")");
  return s;
}

std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int min_n, int max_n, int k) {
  const auto len = static_cast<int64_t>(tokens.size());
  if (k <= 0 || min_n < 1) return {};
  // The suffix itself is not an "earlier" occurrence: a match must start before len - n.
  for (int64_t n = std::min<int64_t>(max_n, len - 1); n >= min_n; --n) {
    const auto suffix = tokens.subspan(static_cast<size_t>(len - n));
    for (int64_t j = len - n - 1; j >= 0; --j) {
      if (!std::equal(suffix.begin(), suffix.end(), tokens.begin() + j)) continue;
      const int64_t from = j + n, to = std::min(len, from + k);
      return {tokens.begin() + from, tokens.begin() + to};
    }
  }
  return {};
}

std::vector<int32_t> ngram_drafter::propose(uint64_t, const draft_context& ctx) {
  return ngram_lookup(ctx.tokens, s_.min_n, s_.max_n, std::min(s_.k, ctx.max_draft));
}

}  // namespace tandem
