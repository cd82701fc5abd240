#pragma once
// What rank 0 (runtime::open) and the workers (run_worker) share when a pipeline runs on
// several ranks: what the topology may ask today, the transport's device check, the
// rendezvous check, and this rank's tensor-parallel group.
#include <chrono>
#include <filesystem>
#include <memory>

#include "common/tp_shard.hpp"
#include "tandem/backend.hpp"
#include "tandem/model.hpp"
#include "tandem/pipeline.hpp"
#include "tandem/transport.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

// config_error for what validates but does not run yet (pipeline parallel together with
// tensor parallel, expert parallel other than over the tensor-parallel ranks), and
// when the transport does not declare the backend's device among those it serves.
void check_topology_runs(const pipeline_spec& spec, const backend& be);

// After the transport's rendezvous: every rank checks that all agree (rank_handshake), and
// gets its group: tensor parallel over all ranks (tensor_parallel == ranks), or its pipeline
// stage (pipeline_parallel == ranks; the last stage on rank 0, pp_stage.hpp).
// The transport is bound to the backend's stream (transport::bind_stream).
tp_group join_ranks(const pipeline_spec& spec, transport& comm, const backend& be, const weight_format& weights,
                    const std::filesystem::path& model_file);

// Rank 0's model: the model itself in a world of one, else a broadcasting_model that drives
// the workers (heartbeat from topology.heartbeat_s).
std::unique_ptr<model> lead_ranks(std::unique_ptr<model> m, transport& comm, const pipeline_spec& spec);

// Rank 0 tells the workers the KV pool it sized (worker.cpp receives it). Collective.
void tell_workers_kv_pool(transport& comm, int64_t pages, int64_t page);

}  // namespace tandem
