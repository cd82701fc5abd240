#pragma once
// The rendezvous check every rank makes before loading weights: rank 0's identity (tandem
// version, model fingerprint, pipeline settings) is broadcast, every rank compares it with
// its own, and all verdicts are all-gathered, so that every rank refuses together, with a
// message naming the rank and the first difference.
#include <filesystem>
#include <string>
#include <vector>

#include "tandem/pipeline.hpp"
#include "tandem/transport.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

// "key=value" lines, compared in order.
struct rank_identity {
  std::vector<std::string> lines;

  // The version, the model (file name and a fingerprint of its tensor table and data) and
  // every pipeline setting that must agree between ranks (the transport's rank and host,
  // and the server section, differ by design).
  static rank_identity of(const pipeline_spec& spec, const weight_format& weights, const std::filesystem::path& file);
};

// The first difference between rank 0's identity and `mine`, "" when they agree.
std::string identity_difference(const rank_identity& rank0, const rank_identity& mine, int my_rank);

// Collective. config_error on every rank when any rank disagrees with rank 0.
void check_ranks_agree(transport& comm, const rank_identity& mine);

}  // namespace tandem
