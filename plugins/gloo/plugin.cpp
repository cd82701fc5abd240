// The transport.gloo plugin entry. Its schema follows the transport convention of
// tandem/transport.hpp: `world_size` (its range is the world sizes it serves), `rank` and
// `devices` (the device memory its collectives take) are filled by the host.
#include "gloo_transport.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

const tandem::config_key keys[] = {
    {"world_size", tandem::config_type::integer, "1", "ranks in the world; the host sets it from topology.ranks",
     1, 1024},
    {"rank", tandem::config_type::integer, "0", "this process's rank; `tandem worker --rank R` sets it", 0, 1023},
    {"devices", tandem::config_type::string, "cpu", "device memory the collectives take (a declaration: host memory only)", 0, 0, "cpu"},
    {"rendezvous", tandem::config_type::string, "127.0.0.1:29500",
     "HOST:PORT where rank 0 serves the rendezvous store and the other ranks find it", 0, 0, nullptr,
     "TANDEM_RENDEZVOUS"},
    {"host", tandem::config_type::string, "127.0.0.1", "IP address this rank's Gloo connections listen on", 0, 0,
     nullptr, "TANDEM_RANK_HOST"},
    {"timeout_s", tandem::config_type::number, "30",
     "a rendezvous or collective not done in this long fails (a rank died or stalled)", 0.1, 86400},
    {"profile", tandem::config_type::boolean, "false",
     "at exit, print each collective's calls and wall time on this rank to stderr (bench/ranks)"},
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem::gloo_transport(tandem::gloo_settings::from(*ctx.cfg));
}

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "transport.gloo", tandem::plugin_interface::transport,
    "ranks over Gloo's TCP transport (host memory); rank 0 serves the rendezvous", keys, std::size(keys), nullptr,
    &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
