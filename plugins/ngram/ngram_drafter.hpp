#pragma once
// drafter.ngram: prompt lookup decoding, as vLLM's n-gram proposer. The draft for a
// sequence is what followed the most recent earlier occurrence of its longest suffix
// n-gram (n from max_n down to min_n), up to k tokens. Stateless: every step searches the
// sequence's tokens afresh.
//
//   ngram_drafter d({.min_n = 1, .max_n = 4, .k = 4});
//   d.propose(id, {.tokens = {5, 6, 7, 5, 6}, .max_draft = 4});   // {7, 5, 6}
#include <cstdint>
#include <span>
#include <vector>

#include "tandem/config.hpp"
#include "tandem/drafter.hpp"

namespace tandem {

struct ngram_settings {
  int min_n = 1;
  int max_n = 4;
  int k = 4;
  int disable_above_batch = 0;
  bool adaptive = true;
  // tandem::config_error when min_n > max_n.
  static ngram_settings from(const config& cfg);
};

// The proposal rule on its own (unit tests): up to `k` tokens that followed the most recent
// earlier match of the longest suffix n-gram of `tokens`, n in [min_n, max_n].
std::vector<int32_t> ngram_lookup(std::span<const int32_t> tokens, int min_n, int max_n, int k);

class ngram_drafter final : public drafter {
 public:
  explicit ngram_drafter(ngram_settings s) : s_(s) {}
  draft_limits limits() const override { return {s_.k, s_.disable_above_batch, s_.adaptive}; }
  std::vector<int32_t> propose(uint64_t seq_id, const draft_context& ctx) override;

 private:
  ngram_settings s_;
};

}  // namespace tandem
