// Portable kernels: the fallback on CPUs without AVX2, and the plain statement of what
// the SIMD versions compute.
#include <algorithm>
#include <cmath>
#include <type_traits>

#include "kernels.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::cpu {
namespace {

void quantize_q8(const float* x, q8_block* out, int64_t n) {
  for (int64_t b = 0; b < n / 32; ++b, x += 32) {
    float amax = 0.0f;
    for (int j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[j]));
    const float d = amax / 127.0f;
    const float id = d > 0.0f ? 1.0f / d : 0.0f;
    int sum = 0;
    for (int j = 0; j < 32; ++j) {
      const int q = static_cast<int>(std::nearbyint(x[j] * id));
      out[b].qs[j] = static_cast<int8_t>(std::clamp(q, -127, 127));
      sum += out[b].qs[j];
    }
    out[b].d = d;
    out[b].s = d * static_cast<float>(sum);
  }
}

// Q4_0 and Q4_1 share the shape x = d * q + m (Q4_0: m = -8 d).
template <class Block>
void dot_q4(const void* w, const q8_block* a, int64_t a_stride, int rows, int64_t nb,
            float* out) {
  const auto* wb = static_cast<const Block*>(w);
  for (int r = 0; r < rows; ++r) {
    const q8_block* ar = a + r * a_stride;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      int dot = 0;
      for (int j = 0; j < 16; ++j) {
        dot += (wb[b].qs[j] & 0x0f) * ar[b].qs[j] + (wb[b].qs[j] >> 4) * ar[b].qs[j + 16];
      }
      const float d = fp16_to_fp32(wb[b].d);
      float m = -8.0f * d;
      if constexpr (std::is_same_v<Block, block_q4_1>) m = fp16_to_fp32(wb[b].m);
      acc += d * ar[b].d * static_cast<float>(dot) + m * ar[b].s;
    }
    out[r] = acc;
  }
}

void dot_q8_0(const void* w, const q8_block* a, int64_t a_stride, int rows, int64_t nb,
              float* out) {
  const auto* wb = static_cast<const block_q8_0*>(w);
  for (int r = 0; r < rows; ++r) {
    const q8_block* ar = a + r * a_stride;
    float acc = 0.0f;
    for (int64_t b = 0; b < nb; ++b) {
      int dot = 0;
      for (int j = 0; j < 32; ++j) dot += wb[b].qs[j] * ar[b].qs[j];
      acc += fp16_to_fp32(wb[b].d) * ar[b].d * static_cast<float>(dot);
    }
    out[r] = acc;
  }
}

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void dot_f32(const float* w, const float* x, int64_t x_stride, int rows, int64_t n, float* out) {
  for (int r = 0; r < rows; ++r) out[r] = dot(w, x + r * x_stride, n);
}

void dot_f16(const uint16_t* w, const float* x, int64_t x_stride, int rows, int64_t n,
             float* out) {
  for (int r = 0; r < rows; ++r) {
    float s = 0.0f;
    for (int64_t i = 0; i < n; ++i) s += fp16_to_fp32(w[i]) * x[r * x_stride + i];
    out[r] = s;
  }
}

void axpy(float* y, float a, const float* x, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

void scale(float* y, float a, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] *= a;
}

}  // namespace

const kernel_table& scalar_kernels() {
  static const kernel_table table{"scalar", quantize_q8, dot_q4<block_q4_0>,
                                  dot_q4<block_q4_1>, dot_q8_0, dot_f32, dot_f16, dot,
                                  axpy, scale};
  return table;
}

}  // namespace tandem::cpu
