#pragma once
// One linear layer to EXL3 (exl3.md §5 steps 2, 5-9): output signs, regularization (output
// and input channel scales, Hadamard on both sides), the global-scale search, LDLQ with
// the Viterbi tile coder on tensor-core-ordered tiles, packing, and the proxy error.
//
//   auto hp = tandem::exl3::prepare_hessian(h.data(), k0, seed);
//   tandem::exl3::quant_options o{.bits = 4};
//   auto ql = tandem::exl3::quantize_linear(w.data(), k0, n0, hp, o, /*sv stream*/ 1);
//   // ql.trellis int16 [k/16][n/16][16K], ql.suh fp16 [k], ql.svh fp16 [n]
#include <cstdint>
#include <functional>
#include <string_view>
#include <vector>

#include "tandem_exl3/codebook.hpp"

#include "tandem_exl3/ldlq.hpp"
#include "tandem_exl3/viterbi.hpp"

namespace tandem::exl3 {

enum class out_scales { always, never, automatic };

struct quant_options {
  int bits = 4;                       // K, 1..8
  codebook cb = codebook::mul1;
  out_scales scales = out_scales::always;
  int threads = 0;                    // tile coder workers, 0 = hardware threads
  bool scale_search = true;           // false: g = 1 (tests)
  int max_scale_tiles = 12;           // cap on the tiles the global-scale search codes
  // Replaces encode_tiles(coder, in, count, states, out, threads) when set (the GPU tile
  // coder, quantize/tile_coder_cuda.hpp); must give the same states and values.
  std::function<void(const tile_coder&, const float*, size_t, uint16_t*, float*)> encoder;
};

struct quantized_linear {
  int k = 0, n = 0;                   // padded sizes
  int bits = 0;
  codebook cb = codebook::mul1;
  std::vector<uint16_t> trellis;      // [k/16][n/16][16*bits]
  std::vector<uint16_t> suh, svh;     // fp16 bits, [k] and [n]
  float global_scale = 1.0f;
  double proxy_error = 0.0;           // tr(EᵀHE) / tr(WᵀHW) in the original basis
  std::vector<float> w_hat;           // [k0][n0] the decoded weight, original basis
};

// w: [k0][n0] row-major (rows = input features). `hp` from prepare_hessian for k0; its su
// is shared by every linear of the qmap; `sv_stream` picks this linear's output signs
// (seed, sv_stream). Throws tandem::error on bad options or shapes.
quantized_linear quantize_linear(const float* w, int k0, int n0, const prepared_hessian& hp,
                                 uint64_t seed, uint64_t sv_stream, const quant_options& o);

}  // namespace tandem::exl3
