// backend.test_ok: a valid backend that `auto` picks (probe score 5).
#include <iterator>

#include "test_objects.hpp"

namespace {

const tandem::config_key keys[] = {
    {"threads", tandem::config_type::integer, "0", "worker threads; 0 = all cores", 0, 256},
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
