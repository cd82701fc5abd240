#pragma once
// The EXL3 tile coder: a tail-biting Viterbi search over the bitshift trellis that picks,
// for 256 weights in position order, the 256 16-bit states whose codebook values are
// closest in squared error (exl3.md §5.7). CPU reference of exllamav3's
// quantize_tiles_kernel, meant to reproduce its arithmetic:
//
//  * inputs are rounded to fp16 first;
//  * per position, d = fp16(cb(s) - w) (one rounding, as __hsub) and the path cost is
//    fp16(d*d + cost_prev) (one rounding, as __hfma); costs are fp16 throughout, with
//    inf for forbidden starts and fp16 overflow to inf;
//  * for each new edge, the candidates k = 0 .. 2^K-1 are compared with strict `<`, so
//    ties keep the lower k;
//  * pass 1 runs the sequence rotated to start at position 128 from free starts, takes the
//    lowest final cost (ties: lowest edge — the GPU's reduction order across thread slots
//    is not mirrored) and traces back to the edge entering position 0 (E*); pass 2 forces
//    the first predecessor to E* and traces back from final edge E*, so every output obeys
//    the tail-biting invariant s_0 >> K == s_255 & ((1 << (16-K)) - 1).
//
//   tandem::exl3::tile_coder coder(tandem::exl3::codebook::mul1, 4);
//   uint16_t states[256]; float q[256];
//   coder.encode(tile, states, q);          // tile: 256 floats in trellis position order
//   tandem::exl3::encode_tiles(coder, tiles, n, all_states, all_q, 2);   // threaded
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

#include "tandem_exl3/codebook.hpp"

namespace tandem::exl3 {

// Rounds to fp16 precision (nearest even, subnormals, overflow to inf) and back to float.
float round_to_half(float x);
// fp16(d*d + c) with a single rounding, for an fp16 d and an fp16 c >= 0 (see viterbi.cpp).
float half_fma_sq(float d, float c);

// The instruction set a tile coder's inner loop runs with. All give bit-identical results.
enum class viterbi_isa { generic, avx2, avx512 };
bool viterbi_isa_supported(viterbi_isa isa);  // by this CPU
const char* viterbi_isa_name(viterbi_isa isa);  // "generic", "avx2", "avx512"
std::optional<viterbi_isa> parse_viterbi_isa(std::string_view s);
// The best this CPU supports, or $TANDEM_EXL3_VITERBI (avx512|avx2|generic; tandem::error
// when unknown or unsupported). Read once per process.
viterbi_isa default_viterbi_isa();

class tile_coder {
 public:
  // K: bits per weight, 1..8 (else tandem::error). The first form runs on
  // default_viterbi_isa(); the second on `isa` (tandem::error when this CPU lacks it).
  tile_coder(codebook cb, int bits);
  tile_coder(codebook cb, int bits, viterbi_isa isa);

  codebook book() const { return cb_; }
  int bits() const { return k_; }
  viterbi_isa isa() const { return isa_; }
  int edges() const { return 1 << (16 - k_); }
  // The codebook value of every state, as float (exact fp16 values).
  const float* table() const { return table_; }

  // The tail-biting search: `in` 256 values in trellis position order; writes the 256
  // states and their codebook values. Returns the fp16 path cost (sum of squared errors).
  // Thread-safe: scratch space is per thread.
  float encode(const float* in, uint16_t* states, float* out) const;

  // One Viterbi run over `len` values (already fp16-rounded) from the given start costs
  // (edges() entries; nullptr = all zero, a free start). Writes the `len` states of the best
  // path. `end_edge` >= 0 forces the final edge, else the cheapest is taken (lowest index
  // on ties). Returns the path cost. Exposed for the tail-biting passes and for tests.
  float run(const float* w, int len, const float* start_cost, int end_edge,
            uint16_t* states) const;

 private:
  codebook cb_;
  int k_;
  viterbi_isa isa_;
  const float* table_;
};

// Encodes `count` tiles (256 floats each) with `threads` workers (0 = hardware threads).
// `cost` (optional) receives each tile's path cost.
void encode_tiles(const tile_coder& coder, const float* in, size_t count, uint16_t* states,
                  float* out, int threads, float* cost = nullptr);

}  // namespace tandem::exl3
