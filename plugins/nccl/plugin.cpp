// The transport.nccl plugin entry. Its schema follows the transport convention of
// tandem/transport.hpp: `world_size` (its range is the world sizes it serves), `rank` and
// `devices` (the device memory its collectives take: CUDA) are filled by the host.
#include "nccl_transport.hpp"
#include "tandem/plugin_abi.hpp"

namespace {

const tandem::config_key keys[] = {
    {"world_size", tandem::config_type::integer, "1", "ranks in the world; the host sets it from topology.ranks",
     1, 1024},
    {"rank", tandem::config_type::integer, "0", "this process's rank; `tandem worker --rank R` sets it", 0, 1023},
    {"devices", tandem::config_type::string, "cuda", "device memory the collectives take (a declaration: CUDA memory)",
     0, 0, "cuda"},
    {"device", tandem::config_type::integer, "0", "the CUDA device of this rank (its GPU ordinal)", 0, 64},
    {"rendezvous", tandem::config_type::string, "127.0.0.1:29500",
     "HOST:PORT where rank 0 serves the store the ncclUniqueId travels through (Gloo's store)", 0, 0, nullptr,
     "TANDEM_RENDEZVOUS"},
    {"timeout_s", tandem::config_type::number, "30",
     "a rendezvous or collective not done in this long fails (a rank died or stalled)", 0.1, 86400},
};

tandem::plugin_object* create(const tandem::plugin_context& ctx) {
  return new tandem::nccl_transport(tandem::nccl_settings::from(*ctx.cfg));
}

const tandem::plugin_descriptor descriptor{
    tandem::plugin_api_version, "transport.nccl", tandem::plugin_interface::transport,
    "ranks over NCCL (CUDA memory, on the bound stream); bootstrapped over Gloo's rendezvous store", keys,
    std::size(keys), nullptr, &create};

}  // namespace

TANDEM_PLUGIN(descriptor)
