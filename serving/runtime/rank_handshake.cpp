#include "rank_handshake.hpp"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <utility>
#include <fmt/format.h>

#include "tandem/error.hpp"

namespace tandem {
namespace {

// Hashing every byte of a large model would cost a minute per start; the tensor table plus
// each tensor's first and last 4 KiB tells a different file, quantization or shard apart.
std::string model_fingerprint(const weight_format& weights) {
  XXH3_state_t* st = XXH3_createState();
  XXH3_64bits_reset(st);
  for (const tensor_info& t : weights.tensors()) {
    const std::string row = fmt::format("{}|{}|{}|{}", t.name, static_cast<int>(t.type), fmt::join(t.shape, ","), t.nbytes);
    XXH3_64bits_update(st, row.data(), row.size());
    if (t.type == dtype::opaque || !t.data) continue;  // an opaque tensor's data is a descriptor, not bytes
    const size_t edge = std::min<size_t>(t.nbytes, 4096);
    XXH3_64bits_update(st, t.data, edge);
    XXH3_64bits_update(st, static_cast<const char*>(t.data) + (t.nbytes - edge), edge);
  }
  const uint64_t h = XXH3_64bits_digest(st);
  XXH3_freeState(st);
  return fmt::format("{:016x}", h);
}

void add_settings(std::vector<std::string>& out, const std::string& section, const config& cfg,
                  std::initializer_list<std::string_view> skip = {}) {
  for (const auto& [k, v] : cfg.values())
    if (std::find(skip.begin(), skip.end(), k) == skip.end()) out.push_back(section + "." + k + "=" + to_string(v));
}

std::string key_of(const std::string& line) { return line.substr(0, line.find('=')); }

}  // namespace

rank_identity rank_identity::of(const pipeline_spec& spec, const weight_format& weights,
                                const std::filesystem::path& file) {
  rank_identity id;
  id.lines.push_back(std::string("tandem version=") + TANDEM_VERSION);
  id.lines.push_back("model file=" + file.filename().string());
  id.lines.push_back("model hash=" + model_fingerprint(weights));
  for (const plugin_choice* c : {&spec.weights, &spec.backend, &spec.scheduler, &spec.transport}) {
    const std::string section = c->name.substr(0, c->name.find('.'));
    id.lines.push_back(section + ".plugin=" + c->name);
    if (c == &spec.transport) add_settings(id.lines, section, c->cfg, {transport_keys::rank, "host"});
    else add_settings(id.lines, section, c->cfg);
  }
  if (spec.drafter) id.lines.push_back("drafter.plugin=" + spec.drafter->name);
  add_settings(id.lines, "engine", spec.engine);
  id.lines.push_back(fmt::format("topology.ranks={}", spec.topo.ranks));
  id.lines.push_back(fmt::format("topology.tensor_parallel={}", spec.topo.tensor_parallel));
  id.lines.push_back(fmt::format("topology.pipeline_parallel={}", spec.topo.pipeline_parallel));
  id.lines.push_back(fmt::format("topology.expert_parallel={}", spec.topo.expert_parallel));
  return id;
}

std::string identity_difference(const rank_identity& rank0, const rank_identity& mine, int my_rank) {
  const size_t n = std::max(rank0.lines.size(), mine.lines.size());
  for (size_t i = 0; i < n; ++i) {
    const std::string a = i < rank0.lines.size() ? rank0.lines[i] : "";
    const std::string b = i < mine.lines.size() ? mine.lines[i] : "";
    if (a == b) continue;
    const std::string what = key_of(a.empty() ? b : a);
    return fmt::format("{} differs: rank 0 has '{}', rank {} has '{}'", what, a.empty() ? "(nothing)" : a, my_rank,
                       b.empty() ? "(nothing)" : b);
  }
  return "";
}

void check_ranks_agree(transport& comm, const rank_identity& mine) {
  std::string text;
  for (const std::string& l : mine.lines) text += l + '\n';
  std::vector<uint8_t> bytes(text.begin(), text.end());
  comm.broadcast(bytes, 0);
  rank_identity rank0;
  std::string line;
  for (uint8_t c : bytes) {
    if (c != '\n') line += static_cast<char>(c);
    else rank0.lines.push_back(std::exchange(line, {}));
  }
  // Fixed-size verdicts so one all-gather carries them all (long ones are cut).
  constexpr size_t verdict_bytes = 512;
  std::string verdict = identity_difference(rank0, mine, comm.rank()).substr(0, verdict_bytes - 1);
  std::vector<uint8_t> own(verdict_bytes, 0), all(verdict_bytes * static_cast<size_t>(comm.world_size()));
  std::memcpy(own.data(), verdict.data(), verdict.size());
  const device host{};
  comm.all_gather(tensor_view::contiguous(own.data(), dtype::u8, {int64_t(verdict_bytes)}, host),
                  tensor_view::contiguous(all.data(), dtype::u8, {int64_t(all.size())}, host));
  std::string refused;
  for (int r = 0; r < comm.world_size(); ++r) {
    const char* v = reinterpret_cast<const char*>(all.data() + static_cast<size_t>(r) * verdict_bytes);
    if (*v) refused += fmt::format("{}rank {} refused to join: {}", refused.empty() ? "" : "; ", r, v);
  }
  if (!refused.empty()) throw config_error("topology", "the ranks disagree: " + refused);
}

}  // namespace tandem
