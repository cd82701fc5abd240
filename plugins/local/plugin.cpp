// The transport.local plugin entry: a world of exactly one rank, on any device.
#include "local_transport.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

const tandem::config_key keys[] = {
    {"world_size", tandem::config_type::integer, "1", "ranks in the world: transport.local serves one", 1, 1},
    {"rank", tandem::config_type::integer, "0", "this process's rank: always 0", 0, 0},
    {"devices", tandem::config_type::string, "cpu,cuda", "device memory the collectives take (any)", 0, 0,
     "cpu,cuda"},
};

tandem::plugin_object* create(const tandem::plugin_context&) { return new tandem::local_transport(); }

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "transport.local", tandem::plugin_interface::transport,
    "a single rank in this process; collectives are identities", keys, std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
