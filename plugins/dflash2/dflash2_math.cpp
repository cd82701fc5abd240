#include "dflash2_math.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

namespace tandem::dflash2 {

namespace {

// Eight partial sums so the compiler can keep them in one vector register (a single
// running f32 sum cannot be reordered without -ffast-math).
float dot(const float* a, const float* b, int64_t n) {
  float acc[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int j = 0; j < 8; ++j) acc[j] += a[i + j] * b[i + j];
  float s = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

void axpy(float a, const float* x, float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) y[i] += a * x[i];
}

}  // namespace

void rms_norm(const float* x, int64_t rows, int64_t d, const float* w, float eps, float* out) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    double ss = 0;
    for (int64_t c = 0; c < d; ++c) ss += static_cast<double>(xr[c]) * xr[c];
    const auto inv = static_cast<float>(1.0 / std::sqrt(ss / static_cast<double>(d) + eps));
    float* o = out + r * d;
    for (int64_t c = 0; c < d; ++c) o[c] = xr[c] * inv * w[c];
  }
}

void rope(float* x, int64_t rows, int heads, int head_dim, std::span<const int64_t> positions, float theta) {
  const int half = head_dim / 2;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i)
    inv_freq[static_cast<size_t>(i)] = static_cast<float>(
        1.0 / std::pow(static_cast<double>(theta), static_cast<double>(static_cast<float>(2 * i) / static_cast<float>(head_dim))));
  std::vector<float> cos_v(static_cast<size_t>(half)), sin_v(static_cast<size_t>(half));
  for (int64_t r = 0; r < rows; ++r) {
    const auto pos = static_cast<float>(positions[static_cast<size_t>(r)]);
    for (int i = 0; i < half; ++i) {
      const float angle = pos * inv_freq[static_cast<size_t>(i)];  // f32, as transformers' matmul
      cos_v[static_cast<size_t>(i)] = static_cast<float>(std::cos(static_cast<double>(angle)));
      sin_v[static_cast<size_t>(i)] = static_cast<float>(std::sin(static_cast<double>(angle)));
    }
    for (int h = 0; h < heads; ++h) {
      float* v = x + (r * heads + h) * head_dim;
      for (int i = 0; i < half; ++i) {
        const float a = v[i], b = v[i + half], c = cos_v[static_cast<size_t>(i)], s = sin_v[static_cast<size_t>(i)];
        v[i] = a * c - b * s;
        v[i + half] = b * c + a * s;
      }
    }
  }
}

void dynconv(const float* u, const float* proj_u, const float* base, int64_t rows, int64_t d, int64_t group_size,
             float* y) {
  const int64_t groups = d / group_size;
  for (int64_t k = 0; k < rows; ++k) {
    const float* uk = u + k * d;
    const float* prev = k > 0 ? u + (k - 1) * d : nullptr;  // u_{-1} = 0
    const float* pk = proj_u + k * 2 * groups;
    float* yk = y + k * d;
    for (int64_t g = 0; g < groups; ++g) {
      const float w0 = base[2 * g] + pk[2 * g], w1 = base[2 * g + 1] + pk[2 * g + 1];
      for (int64_t c = g * group_size; c < (g + 1) * group_size; ++c) yk[c] = w0 * uk[c] + (prev ? w1 * prev[c] : 0.0f);
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t n, float* out) {
  for (int64_t i = 0; i < n; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add_inplace(float* x, const float* y, int64_t n) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

void attention(const float* q, int64_t rows, kv_rows context, kv_rows block, attention_shape s, float* out) {
  const int64_t D = s.head_dim, kv_width = static_cast<int64_t>(s.kv_heads) * D, q_width = s.heads * D;
  const int per_kv = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(D));
  const int64_t n = context.n + block.n;
  std::vector<float> p(static_cast<size_t>(n));
  const auto key = [&](int64_t j) { return j < context.n ? context.k + j * kv_width : block.k + (j - context.n) * kv_width; };
  const auto value = [&](int64_t j) { return j < context.n ? context.v + j * kv_width : block.v + (j - context.n) * kv_width; };
  for (int64_t r = 0; r < rows; ++r)
    for (int h = 0; h < s.heads; ++h) {
      const int64_t off = static_cast<int64_t>(h / per_kv) * D;
      const float* qh = q + r * q_width + h * D;
      float top = -INFINITY;
      for (int64_t j = 0; j < n; ++j) {
        p[static_cast<size_t>(j)] = dot(qh, key(j) + off, D) * scale;
        top = std::max(top, p[static_cast<size_t>(j)]);
      }
      float sum = 0;
      for (int64_t j = 0; j < n; ++j) sum += p[static_cast<size_t>(j)] = std::exp(p[static_cast<size_t>(j)] - top);
      float* o = out + r * q_width + h * D;
      std::fill(o, o + D, 0.0f);
      for (int64_t j = 0; j < n; ++j) axpy(p[static_cast<size_t>(j)] / sum, value(j) + off, o, D);
    }
}

}  // namespace tandem::dflash2
