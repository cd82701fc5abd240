#pragma once
// The drafter's small host-side operations (ARCHITECTURE.md, "Operations"), in f32 over
// row-major host arrays. The heavy products run on the target's backend (dflash2_device);
// these are the parts no backend op matches (dynconv, bidirectional attention over a
// gapped context) or that cost too little to ship.
#include <cstdint>
#include <span>

namespace tandem::dflash2 {

// out = x / sqrt(mean(x²) + eps) * w, per row of d (out may be x).
void rms_norm(const float* x, int64_t rows, int64_t d, const float* w, float eps, float* out);

// Rotates each of `rows` rows of `heads` heads of `head_dim` in place by its position
// (Hugging Face llama's rotate_half over the whole head; inv_freq and the angle in f32 as
// transformers computes them). positions[r] is row r's absolute position.
void rope(float* x, int64_t rows, int heads, int head_dim, std::span<const int64_t> positions, float theta);

// The causal kernel-2 dynamic convolution over the block rows u [rows, d]:
// w_k = base + reshape(proj_u[k], {G, 2}); y_k[c] = w_k[g][0] u_k[c] + w_k[g][1] u_{k-1}[c].
// proj_u: [rows, 2G] (proj · u_k); base: [G, 2]; y must not alias u.
void dynconv(const float* u, const float* proj_u, const float* base, int64_t rows, int64_t d, int64_t group_size,
             float* y);

// out = silu(gate) * up, elementwise over n (out may be gate).
void silu_mul(const float* gate, const float* up, int64_t n, float* out);

// x += y over n.
void add_inplace(float* x, const float* y, int64_t n);

// Keys and values a block attends to: n rows of [kv_heads * head_dim] each.
struct kv_rows {
  const float* k = nullptr;
  const float* v = nullptr;
  int64_t n = 0;
};

struct attention_shape {
  int heads = 0;
  int kv_heads = 0;
  int head_dim = 0;
};

// Bidirectional GQA attention of every q row over all of `context` then all of `block`:
// query head h reads kv head h / (heads / kv_heads), scores scaled by 1/sqrt(head_dim),
// softmax in f32. q, out: [rows, heads * head_dim].
void attention(const float* q, int64_t rows, kv_rows context, kv_rows block, attention_shape s, float* out);

}  // namespace tandem::dflash2
