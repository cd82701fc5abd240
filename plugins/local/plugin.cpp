// The transport.local plugin entry.
#include "local_transport.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

tandem::plugin_object* create(const tandem::plugin_context&) { return new tandem::local_transport(); }

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "transport.local", tandem::plugin_interface::transport,
    "a single rank in this process; collectives are identities", nullptr, 0, nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
