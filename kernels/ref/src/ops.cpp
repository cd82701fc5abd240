// Reference elementwise, norm, linear, embedding and RoPE ops (see tandem_ref/ops.hpp).
#include "tandem_ref/ops.hpp"

#include <cmath>
#include <string>
#include <vector>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::ref {
namespace {

float dot(const float* a, const float* b, int64_t n) {
  float s = 0.0f;
  for (int64_t i = 0; i < n; ++i) s += a[i] * b[i];
  return s;
}

void norm_row(const float* x, const float* w, float eps, int64_t d, float* out) {
  float ss = 0.0f;
  for (int64_t j = 0; j < d; ++j) ss += x[j] * x[j];
  const float inv = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
  for (int64_t j = 0; j < d; ++j) out[j] = x[j] * inv * w[j];
}

int64_t weight_row_bytes(dtype t, int64_t in) {
  auto b = row_bytes(t, in);
  if (!b) {
    throw error("ref::linear: " + std::to_string(in) + " columns is not a whole number of " +
                std::string(name(t)) + " blocks");
  }
  return *b;
}

}  // namespace

void rms_norm(const float* x, const float* w, float eps, int64_t n, int64_t d, float* out) {
  for (int64_t i = 0; i < n; ++i) norm_row(x + i * d, w, eps, d, out + i * d);
}

void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t n,
                  int64_t d, float* out) {
  for (int64_t i = 0; i < n * d; ++i) residual[i] += x[i];
  rms_norm(residual, w, eps, n, d, out);
}

void linear(dtype wtype, const void* w, int64_t out_features, int64_t in_features,
            const float* x, int64_t n, float* y) {
  const int64_t rb = weight_row_bytes(wtype, in_features);
  std::vector<float> row(static_cast<size_t>(in_features));
  const auto* base = static_cast<const uint8_t*>(w);
  for (int64_t o = 0; o < out_features; ++o) {
    dequantize_row(wtype, base + o * rb, row.data(), in_features);
    for (int64_t i = 0; i < n; ++i) {
      y[i * out_features + o] = dot(x + i * in_features, row.data(), in_features);
    }
  }
}

void embed(dtype wtype, const void* table, int64_t vocab, int64_t d, const int32_t* ids,
           int64_t n, float* out) {
  const int64_t rb = weight_row_bytes(wtype, d);
  const auto* base = static_cast<const uint8_t*>(table);
  for (int64_t i = 0; i < n; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw error("embed: token id " + std::to_string(ids[i]) + " at row " +
                  std::to_string(i) + " is outside the vocabulary [0, " +
                  std::to_string(vocab) + ")");
    }
    dequantize_row(wtype, base + ids[i] * rb, out + i * d, d);
  }
}

void rope_angle(float theta, int rotary_dims, int64_t pos, int i, float* cos_out,
                float* sin_out) {
  const double inv_freq = std::pow(static_cast<double>(theta),
                                   -2.0 * static_cast<double>(i) / rotary_dims);
  const double angle = static_cast<double>(pos) * inv_freq;
  *cos_out = static_cast<float>(std::cos(angle));
  *sin_out = static_cast<float>(std::sin(angle));
}

void rope(float* x, int64_t n, int64_t n_heads, int64_t head_dim, const int32_t* positions,
          const rope_params& p) {
  const int rot = p.rotary_dims == 0 ? static_cast<int>(head_dim) : p.rotary_dims;
  if (rot <= 0 || rot > head_dim || rot % 2 != 0) {
    throw error("rope: rotary_dims " + std::to_string(p.rotary_dims) +
                " must be even and within head_dim " + std::to_string(head_dim));
  }
  const int half = rot / 2;
  for (int64_t t = 0; t < n; ++t) {
    for (int i = 0; i < half; ++i) {
      float c = 0, s = 0;
      rope_angle(p.theta, rot, positions[t], i, &c, &s);
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x + (t * n_heads + h) * head_dim;
        const int64_t a = p.neox ? i : 2 * i;
        const int64_t b = p.neox ? i + half : 2 * i + 1;
        const float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
      }
    }
  }
}

void silu_mul(const float* gate, const float* up, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = gate[i] / (1.0f + std::exp(-gate[i])) * up[i];
}

void add(const float* a, const float* b, int64_t count, float* out) {
  for (int64_t i = 0; i < count; ++i) out[i] = a[i] + b[i];
}

void gather_rows(const float* x, int64_t n, int64_t d, const int32_t* rows, int64_t m,
                 float* out) {
  for (int64_t i = 0; i < m; ++i) {
    if (rows[i] < 0 || rows[i] >= n) {
      throw error("gather_rows: row " + std::to_string(rows[i]) + " at index " +
                  std::to_string(i) + " is outside [0, " + std::to_string(n) + ")");
    }
    for (int64_t j = 0; j < d; ++j) out[i * d + j] = x[rows[i] * d + j];
  }
}

}  // namespace tandem::ref
