// Key functions of the plugin interfaces: one vtable and typeinfo per interface, in
// libtandem_core.so, shared by the host and every plugin.
#include "tandem/backend.hpp"
#include "tandem/drafter.hpp"
#include "tandem/error.hpp"
#include "tandem/logger.hpp"
#include "tandem/model.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/scheduler.hpp"
#include "tandem/transport.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

plugin_object::~plugin_object() = default;
weight_format::~weight_format() = default;
backend::~backend() = default;
device_buffer::~device_buffer() = default;
linear_weight::~linear_weight() = default;
kv_storage::~kv_storage() = default;
scheduler::~scheduler() = default;
drafter::~drafter() = default;

std::vector<std::vector<int32_t>> drafter::propose_batch(std::span<const draft_request> reqs) {
  std::vector<std::vector<int32_t>> drafts;
  drafts.reserve(reqs.size());
  for (const draft_request& r : reqs) drafts.push_back(propose(r.seq_id, r.ctx));
  return drafts;
}
transport::~transport() = default;
logger::~logger() = default;
model::~model() = default;

void model::set_kv_type(dtype t) {
  for (const kv_group& g : kv_needs().groups) {
    if (g.type != t)
      throw config_error("engine.kv_dtype", info().arch + " keeps its " + g.what + " cache in " +
                                                std::string(name(g.type)) + ", not " + std::string(name(t)) +
                                                " (use auto or " + std::string(name(g.type)) + ")");
  }
}

std::string kv_spec::describe() const {
  std::string s;
  for (const kv_group& g : groups) {
    if (!s.empty()) s += " + ";
    s += g.what + ": " + std::to_string(g.n_layers) + " layers x " + std::to_string(g.heads) + " x " +
         std::to_string(g.dims) + (g.values ? " (K and V, " : " (K only, ") + std::string(name(g.type)) + ")";
  }
  return s;
}

}  // namespace tandem
