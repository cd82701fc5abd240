// scheduler.test_ok: a valid plugin whose schema exercises every kind of check the
// pipeline validator makes (types, ranges, choices, an environment variable).
#include <iterator>

#include "test_objects.hpp"

namespace {

const tandem::config_key keys[] = {
    {"max_batch", tandem::config_type::integer, "8", "most requests per step", 1, 64},
    {"max_wait_ms", tandem::config_type::integer, "1500", "how long a cold prompt waits", 0,
     600000, nullptr, "TANDEM_TEST_MAX_WAIT_MS"},
    {"policy", tandem::config_type::string, "fifo", "queue order", 0, 0, "fifo|lifo"},
    {"preempt", tandem::config_type::boolean, "false", "may evict running requests"},
    {"ratio", tandem::config_type::number, "0.5", "share of the batch for prefill", 0, 1},
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem_test::test_scheduler(*ctx.cfg);
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, "scheduler.test_ok", tandem::plugin_interface::scheduler,
    "test scheduler: runs every request to completion", keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(desc)
