// weights.test_ok: a valid weight format with one setting.
#include <iterator>

#include "test_objects.hpp"

namespace {

const tandem::config_key keys[] = {
    {"mmap", tandem::config_type::boolean, "true", "map the file instead of reading it"},
};

tandem::plugin_object* create(const tandem::plugin_context&) {
  return new tandem_test::test_weights;
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, "weights.test_ok", tandem::plugin_interface::weight_format,
    "test weight format: opens nothing", keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(desc)
