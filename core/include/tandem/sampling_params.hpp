#pragma once
// How one sequence picks its next token. Plain data, so a step plan can carry it.
#include <cstdint>
#include <type_traits>

namespace tandem {

struct sampling_params {
  float temperature = 0.0f;  // 0 = greedy (argmax)
  int32_t top_k = 0;         // 0 = off
  float top_p = 1.0f;        // 1 = off
  float min_p = 0.0f;        // 0 = off
  uint64_t seed = 0;         // with `step`, fully determines the random draw
  uint64_t step = 0;         // index of the token being sampled within the request
  bool speculative = true;   // false: never draft for this request (no speculative decoding)

  bool greedy() const { return temperature <= 0.0f || top_k == 1; }
};

// The step plan encodes sampling_params byte for byte and backends read it across the
// plugin seam, so it must stay trivially copyable: per-request lists (logit_bias) live on
// the generation request instead.
static_assert(std::is_trivially_copyable_v<sampling_params>);

// OpenAI's logit_bias: `bias` is added to the token's logit before sampling (-100 bans the
// token in practice, +100 forces it). The server checks token ids and the range.
struct token_bias {
  int32_t token = 0;
  float bias = 0;
};
inline constexpr float max_logit_bias = 100.0f;

}  // namespace tandem
