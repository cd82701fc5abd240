#pragma once
// drafter.suffix: SuffixDecoding (arXiv 2411.04975; ArcticInference / vLLM's "suffix"
// method). Two suffix tries are searched each step: the sequence's own (its prompt and
// output so far, the last max_request_tokens of them) and a global one over the outputs of
// recently finished requests (at most max_cached_requests of them and max_cached_tokens
// tokens, oldest evicted first). In each, every suffix of the sequence that occurs is
// matched and its most frequent continuation drafted (suffix_trie::speculate); the draft
// with the highest score (expected accepted tokens) wins. The draft length adapts to the
// match: at most max_spec_factor * match length (and k), and it stops where the
// continuation's estimated probability falls below min_token_prob.
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_map>
#include <vector>

#include "suffix_trie.hpp"
#include "tandem/config.hpp"
#include "tandem/drafter.hpp"

namespace tandem {

struct suffix_settings {
  int k = 16;
  int max_depth = 24;               // longest substring indexed (ArcticInference max_tree_depth)
  double max_spec_factor = 1.0;
  double min_token_prob = 0.1;
  int64_t max_request_tokens = 8192;
  int64_t max_cached_requests = 1000;
  int64_t max_cached_tokens = 65536;
  int disable_above_batch = 0;
  bool adaptive = true;
  static suffix_settings from(const config& cfg);
};

class suffix_drafter final : public drafter {
 public:
  explicit suffix_drafter(suffix_settings s);
  draft_limits limits() const override { return {s_.k, s_.disable_above_batch, s_.adaptive}; }
  std::vector<int32_t> propose(uint64_t seq_id, const draft_context& ctx) override;
  void release(uint64_t seq_id, std::span<const int32_t> output) override;

  // For tests: the global cache's state.
  int64_t cached_requests() const { return static_cast<int64_t>(cached_.size()); }
  int64_t cached_tokens() const { return cached_tokens_; }
  const suffix_trie& global_trie() const { return global_; }
  size_t live_sequences() const { return seqs_.size(); }

 private:
  struct seq_state {
    suffix_trie trie;
    suffix_trie::cursor cursor;
    std::vector<int32_t> tokens;  // what the trie indexed (the window starts at `first`)
    size_t first = 0;
    explicit seq_state(int depth) : trie(depth) {}
  };
  void index(seq_state& st, std::span<const int32_t> tokens);
  void cache_output(std::span<const int32_t> output);

  suffix_settings s_;
  std::unordered_map<uint64_t, seq_state> seqs_;
  suffix_trie global_;
  std::deque<std::vector<int32_t>> cached_;  // oldest first
  int64_t cached_tokens_ = 0;
};

}  // namespace tandem
