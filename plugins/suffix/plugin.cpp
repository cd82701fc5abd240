// The drafter.suffix plugin entry. Defaults follow ArcticInference's suffix decoding
// (max_tree_depth 24, max_spec_factor 1.0, min_token_prob 0.1); the cache bounds are in
// requests and tokens, and the global trie holds at most max_depth nodes per cached token.
#include <iterator>

#include "suffix_drafter.hpp"
#include "tandem/drafter_keys.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

const tandem::config_key keys[] = {
    {"k", tandem::config_type::integer, "16", "most draft tokens per step (vLLM num_speculative_tokens)", 1, 64},
    {"max_depth", tandem::config_type::integer, "24",
     "longest substring the suffix tries index (ArcticInference max_tree_depth)", 2, 256},
    {"max_spec_factor", tandem::config_type::number, "1.0",
     "a draft is at most this many times the matched suffix's length", 0.1, 64},
    {"min_token_prob", tandem::config_type::number, "0.1",
     "stop drafting where the continuation's estimated probability falls below this", 0, 1},
    {"max_request_tokens", tandem::config_type::integer, "8192",
     "a request's own trie indexes its last this many tokens (bounds its memory)", 256, 1 << 24},
    {"max_cached_requests", tandem::config_type::integer, "1000",
     "finished outputs kept in the global trie; 0 = no global cache", 0, 1 << 24},
    {"max_cached_tokens", tandem::config_type::integer, "65536",
     "tokens kept in the global trie (its memory bound: at most max_depth nodes per token)", 0, 1 << 26,
     nullptr, nullptr, "max_cached_requests!=0"},
    tandem::draft_adaptive_key,
    tandem::draft_disable_above_batch_key,
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem::suffix_drafter(tandem::suffix_settings::from(*ctx.cfg));
}

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "drafter.suffix", tandem::plugin_interface::drafter,
    "suffix decoding: suffix tries over the request and recent outputs, adaptive draft length",
    keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
