#include "rank_setup.hpp"

#include <cmath>
#include <sstream>

#include "rank_handshake.hpp"
#include "step_broadcast.hpp"
#include "tandem/error.hpp"

namespace tandem {

void check_topology_runs(const pipeline_spec& spec, const backend& be) {
  if (spec.topo.pipeline_parallel > 1 && spec.topo.tensor_parallel > 1)
    throw config_error("topology.pipeline_parallel", "pipeline parallel together with tensor parallel is not "
                                                     "supported yet: split the model one way (tensor_parallel 1, "
                                                     "or pipeline_parallel 1)");
  if (spec.topo.expert_parallel > 1 && spec.topo.expert_parallel != spec.topo.tensor_parallel)
    throw config_error("topology.expert_parallel", "expert_parallel must be 1 or tensor_parallel (" +
                                                       std::to_string(spec.topo.tensor_parallel) +
                                                       "): the experts split over the tensor-parallel ranks");
  if (!spec.transport.cfg.has(transport_keys::devices)) return;  // a transport without the key takes any memory
  const std::string& devices = spec.transport.cfg.get_string(transport_keys::devices);
  const std::string kind = be.dev().kind == device_kind::cpu ? "cpu" : "cuda";
  std::stringstream list(devices);
  for (std::string d; std::getline(list, d, ',');)
    if (d == kind) return;
  throw config_error("transport.plugin", spec.transport.name + " takes " + devices + " memory, but " + be.describe() +
                                             " computes on " + kind);
}

tp_group join_ranks(const pipeline_spec& spec, transport& comm, const backend& be, const weight_format& weights,
                    const std::filesystem::path& model_file) {
  if (comm.world_size() != spec.topo.ranks)
    throw plugin_error(spec.transport.name, "the transport has " + std::to_string(comm.world_size()) +
                                                " ranks, topology.ranks is " + std::to_string(spec.topo.ranks));
  comm.bind_stream(be.native_stream());  // collectives after the kernels that fill their tensors
  // One rank: no split, unless the transport runs its collectives anyway (transport.nccl on
  // one GPU), where the model takes the split path of many ranks (tensor parallel of 1).
  if (comm.world_size() == 1) return comm.identity() ? tp_group{} : tp_group{.rank = 0, .size = 1, .comm = &comm};
  check_ranks_agree(comm, rank_identity::of(spec, weights, model_file));
  const int stages = spec.topo.pipeline_parallel;
  return {.rank = comm.rank(), .size = spec.topo.tensor_parallel,
          .comm = spec.topo.tensor_parallel > 1 ? &comm : nullptr, .expert_parallel = spec.topo.expert_parallel,
          .pp = {.stage = pp_stage::stage_of_rank(comm.rank(), stages), .stages = stages,
                 .comm = stages > 1 ? &comm : nullptr}};
}

std::unique_ptr<model> lead_ranks(std::unique_ptr<model> m, transport& comm, const pipeline_spec& spec) {
  if (comm.world_size() == 1) return m;
  const auto beat = std::chrono::milliseconds(std::llround(spec.topo.heartbeat_s * 1000));
  return std::make_unique<broadcasting_model>(std::move(m), comm, beat);
}

}  // namespace tandem
