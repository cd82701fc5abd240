// backend.test_ok: a valid backend that `auto` picks (probe score 5), whose schema has
// settings that do nothing unless their siblings allow it (config_key::only_if), as
// backend.cuda's mma_max_rows.
#include <iterator>

#include "test_objects.hpp"

namespace {

const tandem::config_key keys[] = {
    {"threads", tandem::config_type::integer, "0", "worker threads; 0 = all cores", 0, 256},
    {"invariant", tandem::config_type::boolean, "false", "results independent of the batch"},
    {"q8", tandem::config_type::boolean, "true", "8-bit activations"},
    {"mma_rows", tandem::config_type::integer, "16", "rows on the mma kernel", 0, 64, nullptr,
     "TANDEM_TEST_MMA_ROWS", " invariant=false , q8 = true"},
    {"cache_mb", tandem::config_type::integer, "64", "cache size; 0 = no cache", 0, 1024},
    {"cache_policy", tandem::config_type::string, "lru", "cache eviction", 0, 0, "lru|fifo", nullptr,
     "cache_mb!=0"},
};

tandem::probe_result probe() { return {5, "always runs"}; }

tandem::plugin_object* create(const tandem::plugin_context&) {
  return new tandem_test::test_backend;
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, "backend.test_ok", tandem::plugin_interface::backend,
    "test backend: describes itself, computes nothing", keys, std::size(keys), &probe, &create};

}  // namespace

TANDEM_PLUGIN(desc)
