#pragma once
// Reference token sampler: one row of logits -> one token id.
//
// Greedy (temperature <= 0 or top_k == 1): argmax, ties -> lowest id.
// Otherwise, in the order vLLM applies them:
//   1. temperature: p_i = softmax(logits / T);
//   2. top-k: keep the k most probable (ranked by p desc, then id asc);
//   3. top-p: of those, keep the shortest ranked prefix whose renormalised mass >= top_p
//      (at least one token);
//   4. min-p: keep tokens with p_i >= min_p * p_max;
//   5. draw: u = uniform01(seed, step) (Philox-4x32-10); walk the kept tokens in
//      ascending id order and return the first whose cumulative mass exceeds u * kept mass.
// Walking in id order (not rank order) makes the draw a prefix sum over the vocabulary,
// which a GPU computes the same way, so one seed gives the same tokens on every device.
// NaN logits count as -inf; a row without a finite logit throws tandem::error.
//
//   int32_t id = tandem::ref::sample_row(logits, 49152, params);
#include <cstdint>
#include <vector>

#include "tandem/sampling_params.hpp"

namespace tandem::ref {

int32_t sample_row(const float* logits, int vocab, const sampling_params& p);

// The tokens steps 1-4 keep (ascending ids) and their unnormalised weights; for tests
// and for backends that want to check their own filtering.
struct kept_tokens {
  std::vector<int32_t> ids;
  std::vector<double> weights;
};
kept_tokens filter_row(const float* logits, int vocab, const sampling_params& p);

int32_t argmax_row(const float* logits, int vocab);

}  // namespace tandem::ref
