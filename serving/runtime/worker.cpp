#include "tandem/worker.hpp"

#include <cstring>
#include <fmt/format.h>

#include "kv_type.hpp"
#include "rank_setup.hpp"
#include "registry.hpp"
#include "step_broadcast.hpp"
#include "tandem/error.hpp"
#include "tandem/model_store.hpp"
#include "tandem/plugin_host.hpp"

namespace tandem {

void run_worker(const std::filesystem::path& file, int rank, const runtime_options& opt) {
  auto say = [&](std::string_view s) { if (opt.progress) opt.progress(s); };
  if (rank < 1) throw config_error("transport.rank", "a worker's rank is 1 or more (rank 0 is `tandem serve`)");
  plugin_host host(plugin_host::default_search_path());
  std::vector<std::string> overrides = opt.overrides;
  overrides.push_back(fmt::format("transport.{}={}", transport_keys::rank, rank));
  pipeline_result r = load_pipeline(file, host, overrides);
  if (!r.errors.empty() || !r.spec) {
    std::string all;
    for (const diagnostic& d : r.errors) all += (all.empty() ? "" : "\n") + d.str();
    throw config_error("", all.empty() ? "pipeline could not be loaded" : all);
  }
  const pipeline_spec& spec = *r.spec;
  if (spec.topo.ranks < 2) throw config_error("topology.ranks", "the pipeline runs one rank: there is no worker to start");

  // Declared in build order, destroyed in reverse: the model before the backend holding its
  // buffers, the backend before the weights it may point into.
  const std::filesystem::path model_file = resolve_model(spec.model, opt.allow_pull, opt.progress);
  std::unique_ptr<weight_format> weights = host.create<weight_format>(spec.weights.name, spec.weights.cfg);
  weights->open(model_file);
  std::unique_ptr<backend> be = host.create<backend>(spec.backend.name, spec.backend.cfg);
  check_topology_runs(spec, *be);
  say(fmt::format("rank {} of {}: joining the rendezvous", rank, spec.topo.ranks));
  std::unique_ptr<transport> comm = host.create<transport>(spec.transport.name, spec.transport.cfg);
  const tp_group tp = join_ranks(spec, *comm, *be, *weights, model_file);
  say(fmt::format("rank {}: loading its share of {} onto {}", rank, model_file.filename().string(), be->describe()));
  std::unique_ptr<model> m = create_model(*be, *weights, model_file.string(), tp);
  apply_kv_dtype(spec.engine, *be, spec.backend.name, *m);  // as rank 0 did, so the pages match
  say(fmt::format("rank {}: {}", rank, m->info().detail));
  // Rank 0 sizes the KV pool from its own memory and the same page size; every rank's
  // share of a page is the same fraction, so the same page count fits.
  std::vector<uint8_t> pool;
  comm->broadcast(pool, 0);
  if (pool.size() != 16) throw error("worker: malformed KV pool size from rank 0");
  int64_t pages = 0, page = 0;
  std::memcpy(&pages, pool.data(), 8);
  std::memcpy(&page, pool.data() + 8, 8);
  m->allocate_kv(pages, static_cast<int>(page));
  say(fmt::format("rank {}: ready ({} KV pages of {})", rank, pages, page));
  run_worker_loop(*m, *comm);
}

// Rank 0's half of the KV pool agreement above (runtime.cpp calls it).
void tell_workers_kv_pool(transport& comm, int64_t pages, int64_t page) {
  if (comm.world_size() == 1) return;
  std::vector<uint8_t> pool(16);
  std::memcpy(pool.data(), &pages, 8);
  std::memcpy(pool.data() + 8, &page, 8);
  comm.broadcast(pool, 0);
}

}  // namespace tandem
