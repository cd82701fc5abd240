// transport.test_ok (multi-rank capable as far as validation knows) and, built from the
// same source with -DTEST_AS_LOCAL, a stand-in named transport.local so that the
// single-rank rule of transport.local is tested without the real plugin.
#include "test_objects.hpp"

namespace {

#ifdef TEST_AS_LOCAL
constexpr const char* plugin_name = "transport.local";
#else
constexpr const char* plugin_name = "transport.test_ok";
#endif

tandem::plugin_object* create(const tandem::plugin_context&) {
  return new tandem_test::test_transport;
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, plugin_name, tandem::plugin_interface::transport,
    "test transport: one rank", nullptr, 0, nullptr, &create};

}  // namespace

TANDEM_PLUGIN(desc)
