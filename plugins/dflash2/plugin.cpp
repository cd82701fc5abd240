// The drafter.dflash2 plugin entry. k, disable_above_batch and adaptive are named as
// drafter.ngram names them; weights is the trained drafter directory.
#include <iterator>

#include "dflash2_drafter.hpp"
#include "tandem/drafter_keys.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

const tandem::config_key keys[] = {
    {"weights", tandem::config_type::string, nullptr,
     "the drafter directory (config.json, model.safetensors, MANIFEST.sha256); relative to the working directory"},
    {"k", tandem::config_type::integer, "0",
     "most draft tokens per step (vLLM num_speculative_tokens), at most block_size - 1; 0 = block_size - 1", 0, 64},
    {"weights_type", tandem::config_type::string, "f32",
     "how the drafter's matrices are kept on the backend: f32 (exact, as trained in bf16) or q8_0 (8-bit blocks "
     "as GGUF's Q8_0: a quarter of the bytes a block reads; matrices whose width is not a multiple of 32 stay f32)",
     0, 0, "f32|q8_0"},
    tandem::draft_adaptive_key,
    tandem::draft_disable_above_batch_key,
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem::dflash2_drafter(tandem::dflash2_settings::from(*ctx.cfg));
}

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "drafter.dflash2", tandem::plugin_interface::drafter,
    "DFlash2 block drafter conditioned on the target's hidden states (runs as the target backend's ops; the candidate selector on the host)",
    keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
