// The drafter.ngram plugin entry. Setting names follow vLLM's prompt_lookup_min / _max and
// num_speculative_tokens.
#include <iterator>

#include "ngram_drafter.hpp"
#include "tandem/drafter_keys.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

const tandem::config_key keys[] = {
    {"min_n", tandem::config_type::integer, "1", "shortest suffix n-gram to look up (vLLM prompt_lookup_min)", 1, 64},
    {"max_n", tandem::config_type::integer, "4", "longest suffix n-gram to look up (vLLM prompt_lookup_max)", 1, 64},
    {"k", tandem::config_type::integer, "4", "most draft tokens per step (vLLM num_speculative_tokens)", 1, 64},
    tandem::draft_adaptive_key,
    tandem::draft_disable_above_batch_key,
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem::ngram_drafter(tandem::ngram_settings::from(*ctx.cfg));
}

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "drafter.ngram", tandem::plugin_interface::drafter,
    "prompt lookup: the tokens after the latest earlier match of the longest suffix n-gram",
    keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
