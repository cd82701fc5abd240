// backend.test_probe0: loads fine but its probe says it cannot run here; `auto` must skip it
// even though its name sorts first.
#include "test_objects.hpp"

namespace {

tandem::probe_result probe() { return {0, "no test accelerator here"}; }

tandem::plugin_object* create(const tandem::plugin_context&) {
  return new tandem_test::test_backend;
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, "backend.test_probe0", tandem::plugin_interface::backend,
    "test backend that cannot run", nullptr, 0, &probe, &create};

}  // namespace

TANDEM_PLUGIN(desc)
