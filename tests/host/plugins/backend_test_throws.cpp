// backend.test_throws: a valid descriptor whose factory throws a plain std::exception; the
// host must wrap it in a plugin_error naming the plugin.
#include <stdexcept>

#include "test_objects.hpp"

namespace {

tandem::probe_result probe() { return {1, ""}; }

tandem::plugin_object* create(const tandem::plugin_context&) {
  throw std::runtime_error("test factory failure");
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, "backend.test_throws", tandem::plugin_interface::backend,
    "test backend whose factory throws", nullptr, 0, &probe, &create};

}  // namespace

TANDEM_PLUGIN(desc)
