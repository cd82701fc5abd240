// The scheduler.warm_bypass plugin entry.
#include <iterator>

#include "tandem/plugin_abi.hpp"
#include "warm_bypass_scheduler.hpp"

namespace {

const tandem::config_key keys[] = {
    {"max_batch", tandem::config_type::integer, "16", "most requests in one engine step", 1, 4096},
    {"max_tokens_per_step", tandem::config_type::integer, "4096",
     "token budget of one step (decodes plus prefill chunks)", 1, 1 << 20},
    {"page_tokens", tandem::config_type::integer, "3584",
     "a waiting request whose uncached remainder is at most this is warm and skips the queue; "
     "also the last stretch of a cold prompt that is never capped", 1, 1 << 24},
    {"max_wait_ms", tandem::config_type::number, "1500",
     "a cold request held while others decode proceeds after waiting this long", 0, 3.6e6,
     nullptr, "MAX_WAIT_MS"},
    {"late_cap", tandem::config_type::integer, "512",
     "prefill tokens per step of a cold request while others decode, until its last page", 1, 1 << 20,
     nullptr, "LATE_CAP"},
    {"max_cold_prefills", tandem::config_type::integer, "1",
     "cold prefills in progress at once while other requests decode", 1, 4096},
    {"lone_prefill_tokens", tandem::config_type::integer, "8192",
     "token budget of a step in which no request decodes, when larger than max_tokens_per_step; "
     "0 = always max_tokens_per_step", 0, 1 << 20},
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem::warm_bypass_scheduler(tandem::warm_bypass_settings::from(*ctx.cfg));
}

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "scheduler.warm_bypass", tandem::plugin_interface::scheduler,
    "cached follow-ups skip the queue; cold prompts held while others decode, then capped",
    keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
