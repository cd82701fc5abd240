#include "tandem_exl3/trellis.hpp"

#include <array>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::exl3 {
namespace {

void check_bits(int K) {
  if (K < min_bits || K > max_bits)
    throw std::invalid_argument("exl3: " + std::to_string(K) + " bits per weight (must be 1..8)");
}

// 32-bit words of the big-endian bit stream: each on-disk pair is swapped, so reading the
// pair as one little-endian uint32 gives the stream word directly (§3.2 step 1).
uint32_t stream_word(const uint16_t* tile, int m) {
  return static_cast<uint32_t>(tile[2 * m]) | static_cast<uint32_t>(tile[2 * m + 1]) << 16;
}

}  // namespace

void unpack_tile_states(const uint16_t* tile, int K, uint16_t states[tile_positions]) {
  check_bits(K);
  const int n_words = 8 * K;  // 32-bit words in the ring of 256*K bits
  std::array<uint32_t, 64> wd{};
  for (int m = 0; m < n_words; ++m) wd[m] = stream_word(tile, m);
  // The window of position p is ring bits [b1-16, b1) with b1 = (p+1)K; the ring length is
  // added so the start is never negative. K <= 8 keeps a window inside two adjacent words.
  for (int p = 0; p < tile_positions; ++p) {
    const int b1 = (p + 1) * K + 256 * K;
    const int last = (b1 - 1) / 32;  // the word holding the window's last bit
    const uint64_t pair = static_cast<uint64_t>(wd[(last - 1 + n_words) % n_words]) << 32 |
                          wd[last % n_words];
    states[p] = static_cast<uint16_t>(pair >> (32 * (last + 1) - b1));
  }
}

void pack_tile_states(const uint16_t states[tile_positions], int K, uint16_t* tile) {
  check_bits(K);
  // Stream words (16 bits, MSB first), then swapped in pairs on the way out.
  std::array<uint16_t, 128> stream{};
  const uint32_t mask = (1u << K) - 1;
  uint32_t acc = 0;
  int have = 0, out = 0;
  for (int p = 0; p < tile_positions; ++p) {
    acc = acc << K | (states[p] & mask);
    have += K;
    if (have >= 16) {
      have -= 16;
      stream[out++] = static_cast<uint16_t>(acc >> have);
      acc &= (1u << have) - 1;
    }
  }
  for (int m = 0; m < 8 * K; ++m) {
    tile[2 * m] = stream[2 * m + 1];
    tile[2 * m + 1] = stream[2 * m];
  }
}

bool is_tail_biting(const uint16_t states[tile_positions], int K) {
  check_bits(K);
  const uint32_t keep = (1u << (16 - K)) - 1;  // predecessor bits that survive the shift
  for (int p = 0; p < tile_positions; ++p) {
    const uint16_t prev = states[(p + tile_positions - 1) % tile_positions];
    if (static_cast<uint32_t>(states[p] >> K) != (prev & keep)) return false;
  }
  return true;
}

const uint16_t* decode_table(codebook cb) {
  static const auto tables = [] {
    std::array<std::vector<uint16_t>, 3> t;
    for (int c = 0; c < 3; ++c) {
      t[c].resize(65536);
      for (uint32_t s = 0; s < 65536; ++s) t[c][s] = decode_bits(static_cast<codebook>(c), s);
    }
    return t;
  }();
  return tables.at(static_cast<size_t>(cb)).data();
}

void decode_tile(codebook cb, const uint16_t* tile, int K, uint16_t out[16][16]) {
  uint16_t states[tile_positions];
  unpack_tile_states(tile, K, states);
  const uint16_t* table = decode_table(cb);
  for (int p = 0; p < tile_positions; ++p) {
    const tile_rc e = position_to_rc(p);
    out[e.r][e.c] = table[states[p]];
  }
}

}  // namespace tandem::exl3
