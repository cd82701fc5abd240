// transport.test_ok (multi-rank capable as far as validation knows) and, built from the
// same source with -DTEST_AS_LOCAL, a stand-in named transport.local so that the
// single-rank rule of transport.local is tested without the real plugin.
#include <iterator>

#include "test_objects.hpp"

namespace {

#ifdef TEST_AS_LOCAL
constexpr const char* plugin_name = "transport.local";
#else
constexpr const char* plugin_name = "transport.test_ok";
#endif

#ifdef TEST_AS_LOCAL
const tandem::config_key keys[] = {{"world_size", tandem::config_type::integer, "1", "one rank", 1, 1}};
#else
const tandem::config_key keys[] = {{"world_size", tandem::config_type::integer, "1", "any world", 1, 1024},
                                   {"rank", tandem::config_type::integer, "0", "this rank", 0, 1023}};
#endif

tandem::plugin_object* create(const tandem::plugin_context&) {
  return new tandem_test::test_transport;
}

const tandem::plugin_descriptor desc{
    tandem::plugin_api_version, plugin_name, tandem::plugin_interface::transport,
    "test transport: one rank", keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(desc)
