#include "suffix_drafter.hpp"

#include <algorithm>
#include <cmath>

namespace tandem {

suffix_settings suffix_settings::from(const config& cfg) {
  suffix_settings s;
  s.k = static_cast<int>(cfg.get_int("k"));
  s.max_depth = static_cast<int>(cfg.get_int("max_depth"));
  s.max_spec_factor = cfg.get_number("max_spec_factor");
  s.min_token_prob = cfg.get_number("min_token_prob");
  s.max_request_tokens = cfg.get_int("max_request_tokens");
  s.max_cached_requests = cfg.get_int("max_cached_requests");
  s.max_cached_tokens = cfg.get_int("max_cached_tokens");
  s.disable_above_batch = static_cast<int>(cfg.get_int("disable_above_batch"));
  s.adaptive = cfg.get_bool("adaptive");
  return s;
}

suffix_drafter::suffix_drafter(suffix_settings s) : s_(s), global_(s.max_depth) {}

// Brings the sequence's trie up to `tokens` (which only ever grow for one id), sliding its
// window: paths that start before the last max_request_tokens tokens are removed.
void suffix_drafter::index(seq_state& st, std::span<const int32_t> tokens) {
  const bool same = st.tokens.size() <= tokens.size() &&
                    std::equal(st.tokens.begin() + static_cast<std::ptrdiff_t>(st.first), st.tokens.end(),
                               tokens.begin() + static_cast<std::ptrdiff_t>(st.first));
  if (!same) st = seq_state(s_.max_depth);  // not the sequence indexed before: start over
  for (size_t i = st.tokens.size(); i < tokens.size(); ++i) {
    st.trie.append(st.cursor, tokens[i]);
    st.tokens.push_back(tokens[i]);
    while (static_cast<int64_t>(st.tokens.size() - st.first) > s_.max_request_tokens) {
      // The oldest path is complete (max_request_tokens >= max_depth), so it is fully indexed.
      st.trie.remove_path(st.tokens, st.first);
      ++st.first;
    }
  }
}

std::vector<int32_t> suffix_drafter::propose(uint64_t seq_id, const draft_context& ctx) {
  if (ctx.tokens.empty()) return {};
  seq_state& st = seqs_.try_emplace(seq_id, s_.max_depth).first->second;
  // The newest token is not indexed yet: the occurrence the match is made for has no
  // continuation, and counting it would only dilute the continuation's probabilities.
  index(st, ctx.tokens.first(ctx.tokens.size() - 1));
  const int max_tokens = std::min(s_.k, ctx.max_draft);
  suffix_trie::draft_result own = st.trie.speculate(ctx.tokens, max_tokens, s_.max_spec_factor, s_.min_token_prob);
  suffix_trie::draft_result global = global_.speculate(ctx.tokens, max_tokens, s_.max_spec_factor, s_.min_token_prob);
  return (global.score > own.score ? global : own).tokens;
}

void suffix_drafter::release(uint64_t seq_id, std::span<const int32_t> output) {
  seqs_.erase(seq_id);
  cache_output(output);
}

void suffix_drafter::cache_output(std::span<const int32_t> output) {
  if (output.empty() || static_cast<int64_t>(output.size()) > s_.max_cached_tokens || s_.max_cached_requests == 0) return;
  global_.insert(output);
  cached_.emplace_back(output.begin(), output.end());
  cached_tokens_ += static_cast<int64_t>(output.size());
  while (static_cast<int64_t>(cached_.size()) > s_.max_cached_requests || cached_tokens_ > s_.max_cached_tokens) {
    global_.remove(cached_.front());
    cached_tokens_ -= static_cast<int64_t>(cached_.front().size());
    cached_.pop_front();
  }
}

}  // namespace tandem
