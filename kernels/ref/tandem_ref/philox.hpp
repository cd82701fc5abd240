#pragma once
// Philox-4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11):
// a counter-based generator, so a draw depends only on (key, counter) and every device
// (CPU, CUDA's curand Philox) can reproduce it without carrying state.
//
//   float u = tandem::ref::uniform01(seed, step);   // the sampler's draw for one token
#include <array>
#include <cstdint>

namespace tandem::ref {

using philox_counter = std::array<uint32_t, 4>;
using philox_key = std::array<uint32_t, 2>;

constexpr philox_counter philox4x32_10(philox_counter c, philox_key k) {
  constexpr uint32_t m0 = 0xD2511F53u, m1 = 0xCD9E8D57u;
  constexpr uint32_t w0 = 0x9E3779B9u, w1 = 0xBB67AE85u;
  for (int round = 0; round < 10; ++round) {
    const uint64_t p0 = uint64_t{m0} * c[0];
    const uint64_t p1 = uint64_t{m1} * c[2];
    c = {static_cast<uint32_t>(p1 >> 32) ^ c[1] ^ k[0], static_cast<uint32_t>(p1),
         static_cast<uint32_t>(p0 >> 32) ^ c[3] ^ k[1], static_cast<uint32_t>(p0)};
    k = {k[0] + w0, k[1] + w1};
  }
  return c;
}

// Uniform in [0, 1) with 24 random bits (exact in float): key = seed, counter = (step, 0).
constexpr float uniform01(uint64_t seed, uint64_t step) {
  const philox_counter out = philox4x32_10(
      {static_cast<uint32_t>(step), static_cast<uint32_t>(step >> 32), 0u, 0u},
      {static_cast<uint32_t>(seed), static_cast<uint32_t>(seed >> 32)});
  return static_cast<float>(out[0] >> 8) * (1.0f / 16777216.0f);
}

}  // namespace tandem::ref
