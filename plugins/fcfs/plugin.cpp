// The scheduler.fcfs plugin entry.
#include <iterator>

#include "fcfs_scheduler.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

const tandem::config_key keys[] = {
    {"max_batch", tandem::config_type::integer, "16", "most requests in one engine step", 1, 4096},
    {"max_tokens_per_step", tandem::config_type::integer, "512",
     "token budget of one step (decodes plus prefill chunks)", 1, 1 << 20},
    {"long_prefill_token_threshold", tandem::config_type::integer, "0",
     "most prompt tokens one request prefills per step (vLLM's knob); 0 = the step budget", 0, 1 << 20},
    {"lone_prefill_tokens", tandem::config_type::integer, "8192",
     "token budget of a step in which no request decodes (a prefill that delays no one), when larger "
     "than max_tokens_per_step; 0 = always max_tokens_per_step", 0, 1 << 20},
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem::fcfs_scheduler(tandem::fcfs_settings::from(*ctx.cfg));
}

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "scheduler.fcfs", tandem::plugin_interface::scheduler,
    "first come, first served; decodes before chunked prefills; token budget per step",
    keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
