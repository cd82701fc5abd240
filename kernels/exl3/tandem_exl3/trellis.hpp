#pragma once
// EXL3 trellis tiles: where each of a tile's 256 positions lives, and the bit stream that
// holds their 16-bit states. Spec: shared/research/exl3.md §3.1-3.2 (decode) and §5.8 (pack).
//
// A tile is 16*K uint16 words exactly as stored in the `trellis` tensor (int16
// [k/16][n/16][16K]); K in 1..8 is the bits per weight.
//
//   uint16_t s[256];
//   tandem::exl3::unpack_tile_states(words, 4, s);        // s[p], p in position order
//   auto [r, c] = tandem::exl3::position_to_rc(p);         // element of the 16x16 tile
//   uint16_t w[16][16];
//   tandem::exl3::decode_tile(tandem::exl3::codebook::mul1, words, 4, w);  // fp16 bits
#include <cstdint>

#include "tandem_exl3/codebook.hpp"

namespace tandem::exl3 {

inline constexpr int tile_positions = 256;
inline constexpr int min_bits = 1, max_bits = 8;

// uint16 words of one tile at K bits per weight.
constexpr int tile_words(int K) { return 16 * K; }

struct tile_rc {
  int r;  // row within the tile: the input (k) index
  int c;  // column within the tile: the output (n) index
};

// Position p (0..255) -> tile element: the mma.m16n8k16 B-fragment order (§3.2 step 4).
constexpr tile_rc position_to_rc(int p) {
  constexpr int row_of_j[4] = {0, 1, 8, 9};
  const int lane = p >> 3, j = p & 7;
  return {2 * (lane & 3) + row_of_j[j & 3], (lane >> 2) + 8 * (j >> 2)};
}

// The inverse of position_to_rc.
constexpr int rc_to_position(int r, int c) {
  const int lane = (r & 7) / 2 + 4 * (c & 7);
  const int j = (r & 1) + 2 * (r >> 3) + 4 * (c >> 3);
  return lane * 8 + j;
}

// The 256 states of a tile, in position order. Each state is the 16 ring bits ending at
// its position's K bits (tail-biting: state 0 takes its top bits from the tile's end).
// Throws std::invalid_argument when K is outside 1..8.
void unpack_tile_states(const uint16_t* tile_words, int K, uint16_t states[tile_positions]);

// The inverse: keeps the low K bits of each state, writes them MSB first as a ring of
// 256*K bits, 16-bit stream words with each pair swapped (as the trellis tensor stores
// them). Writes tile_words(K) words. States that are not a tail-biting sequence (see
// is_tail_biting) lose their upper bits; unpack then returns the consistent sequence.
void pack_tile_states(const uint16_t states[tile_positions], int K, uint16_t* tile_words);

// Whether every state is its predecessor (ring order) shifted left by K plus its own K
// bits, which is exactly the set of sequences pack/unpack round-trips.
bool is_tail_biting(const uint16_t states[tile_positions], int K);

// The tile's 16x16 fp16 weights (bits), out[r][c] with r = input row, c = output column.
void decode_tile(codebook cb, const uint16_t* tile_words, int K, uint16_t out[16][16]);

// fp16 bits of every state under `cb`: a 65536-entry table built once, thread-safe.
const uint16_t* decode_table(codebook cb);

}  // namespace tandem::exl3
