#pragma once
// How one sequence picks its next token. Plain data, so a step plan can carry it.
#include <cstdint>

namespace tandem {

struct sampling_params {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;         // with `step`, fully determines the random draw
  uint64_t step = 0;         // index of the token being sampled within the request

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

}  // namespace tandem
