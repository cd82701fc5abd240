#pragma once
// Reference ops: plain, single-threaded C++ with fp32 accumulation, on contiguous host
// buffers. They define what every backend computes; fast kernels are tested against them.
//
//   std::vector<float> y(n * out);
//   tandem::ref::linear(dtype::q4_1, w.data, out, in, x.data(), n, y.data());
//
// Shapes are row-major, outermost first, as in backend.hpp.
#include <cstdint>

#include "tandem/backend.hpp"
#include "tandem/dtype.hpp"

namespace tandem::ref {

// out[i, :] = x[i, :] / sqrt(mean(x[i, :]^2) + eps) * w.   x, out: [n, d]; w: [d]
void rms_norm(const float* x, const float* w, float eps, int64_t n, int64_t d, float* out);

// residual += x, then out = rms_norm(residual).   residual, x, out: [n, d]
void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t n,
                  int64_t d, float* out);

// y = x W^T.  W: [out_features, in_features] of `wtype` (f32, f16, bf16, q4_0, q4_1, q8_0;
// quantized rows are GGML blocks), x: f32 [n, in_features] -> y: f32 [n, out_features].
// Each weight row is dequantized to f32 and dotted with fp32 accumulation.
void linear(dtype wtype, const void* w, int64_t out_features, int64_t in_features,
            const float* x, int64_t n, float* y);

// out[i, :] = dequantized row ids[i] of table [vocab, d].  Throws tandem::error for an id
// outside [0, vocab).
void embed(dtype wtype, const void* table, int64_t vocab, int64_t d, const int32_t* ids,
           int64_t n, float* out);

// cos/sin of the rotation of pair `i` (0 <= i < rotary_dims / 2) at `pos`: angle =
// pos * theta^(-2i / rotary_dims), evaluated in double so every backend can match it.
void rope_angle(float theta, int rotary_dims, int64_t pos, int i, float* cos_out,
                float* sin_out);

// Rotates x in place.  x: [n, n_heads, head_dim]; positions: [n].  p.neox = false rotates
// adjacent pairs (x[2i], x[2i+1]) (GGUF llama), true rotates (x[i], x[i + rot/2]).
// Dims past rotary_dims (0 = head_dim) are left as they are.
void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const rope_params& p);

// out = silu(gate) * up = gate / (1 + exp(-gate)) * up, elementwise over `count` floats.
void silu_mul(const float* gate, const float* up, int64_t count, float* out);

// out = a + b over `count` floats.
void add(const float* a, const float* b, int64_t count, float* out);

// out[i, :] = x[rows[i], :].  x: [n, d]; rows: [m] in [0, n) else tandem::error.
void gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t m,
                 float* out);

}  // namespace tandem::ref
