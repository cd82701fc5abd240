#include "tandem_exl3/linear.hpp"

#include <stdexcept>
#include <string>
#include <vector>

#include "tandem_exl3/hadamard.hpp"
#include "tandem_exl3/trellis.hpp"

namespace tandem::exl3 {
namespace {

[[noreturn]] void fail(const std::string& what) { throw std::invalid_argument("exl3: " + what); }

bool is_chunked(int64_t v) { return v > 0 && v % hadamard_size == 0; }

const uint16_t* tile_at(const exl3_matrix& m, int64_t tk, int64_t tn) {
  return m.trellis + (tk * (m.n / 16) + tn) * tile_words(m.K);
}

// Tile (tk, tn) of Ŵ as floats, t[r][c].
void decode_tile_f32(const exl3_matrix& m, int64_t tk, int64_t tn, float t[16][16]) {
  uint16_t h[16][16];
  decode_tile(m.cb, tile_at(m, tk, tn), m.K, h);
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) t[r][c] = f16_to_f32(h[r][c]);
}

// Butterflies across the rows of a 128-row band of `cols` columns, then ×scale: the
// left multiplication by H, vectorized along the rows.
void rotate_rows(float* band, int64_t cols) {
  for (int h = 1; h < hadamard_size; h <<= 1) {
    for (int i = 0; i < hadamard_size; ++i) {
      if (i & h) continue;
      float* lo = band + i * cols;
      float* up = band + (i | h) * cols;
      for (int64_t j = 0; j < cols; ++j) {
        const float a = lo[j], b = up[j];
        lo[j] = a + b;
        up[j] = a - b;
      }
    }
  }
  for (int64_t j = 0; j < hadamard_size * cols; ++j) band[j] *= hadamard_scale;
}

}  // namespace

void validate(const exl3_matrix& m) {
  if (m.K < min_bits || m.K > max_bits) fail(std::to_string(m.K) + " bits per weight (must be 1..8)");
  if (!is_chunked(m.k) || !is_chunked(m.n))
    fail("padded shape " + std::to_string(m.k) + " x " + std::to_string(m.n) +
         " is not a positive multiple of 128 in both dimensions");
  if (!m.trellis || !m.suh || !m.svh) fail("trellis, suh and svh are all required");
}

void decode_rotated(const exl3_matrix& m, uint16_t* w_hat) {
  validate(m);
  uint16_t h[16][16];
  for (int64_t tk = 0; tk < m.k / 16; ++tk)
    for (int64_t tn = 0; tn < m.n / 16; ++tn) {
      decode_tile(m.cb, tile_at(m, tk, tn), m.K, h);
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) w_hat[(tk * 16 + r) * m.n + tn * 16 + c] = h[r][c];
    }
}

void reconstruct_f32_rows(const exl3_matrix& m, int64_t k0, int64_t k1, float* W) {
  validate(m);
  if (k0 < 0 || k1 > m.k || k0 >= k1 || k0 % hadamard_size || k1 % hadamard_size)
    fail("row band [" + std::to_string(k0) + ", " + std::to_string(k1) + ") of " +
         std::to_string(m.k) + " rows is not made of 128-row blocks");
  float t[16][16];
  for (int64_t tk = k0 / 16; tk < k1 / 16; ++tk)
    for (int64_t tn = 0; tn < m.n / 16; ++tn) {
      decode_tile_f32(m, tk, tn, t);
      for (int r = 0; r < 16; ++r)
        for (int c = 0; c < 16; ++c) W[(tk * 16 - k0 + r) * m.n + tn * 16 + c] = t[r][c];
    }
  for (int64_t i = 0; i < k1 - k0; ++i) hadamard128(W + i * m.n, m.n);  // Ŵ·Hb_n
  for (int64_t b = 0; b < k1 - k0; b += hadamard_size) rotate_rows(W + b * m.n, m.n);  // Hb_k·
  std::vector<float> sv(m.n);
  for (int64_t j = 0; j < m.n; ++j) sv[j] = f16_to_f32(m.svh[j]);
  for (int64_t i = 0; i < k1 - k0; ++i) {
    const float su = f16_to_f32(m.suh[k0 + i]);
    float* row = W + i * m.n;
    for (int64_t j = 0; j < m.n; ++j) row[j] = row[j] * su * sv[j];
  }
}

void reconstruct_f32(const exl3_matrix& m, float* W) { reconstruct_f32_rows(m, 0, m.k, W); }

void linear_ref(const exl3_matrix& mat, const float* x, int64_t m, float* y, rounding r,
                int64_t n_begin, int64_t n_end) {
  validate(mat);
  if (n_end < 0) n_end = mat.n;
  if (m < 0 || n_begin < 0 || n_end > mat.n || n_begin > n_end || n_begin % hadamard_size ||
      n_end % hadamard_size)
    fail("bad row count or column range for linear_ref");
  const bool gpu = r == rounding::gpu;
  const int64_t k = mat.k, n = mat.n, w = n_end - n_begin;
  // 1. xh = H(x ⊙ suh), one row at a time.
  std::vector<float> xh(static_cast<size_t>(m * k));
  std::vector<uint16_t> x16(k), xh16(k);
  for (int64_t i = 0; i < m; ++i) {
    float* row = xh.data() + i * k;
    if (gpu) {
      for (int64_t j = 0; j < k; ++j) x16[j] = f32_to_f16(x[i * k + j]);
      hadamard128_input_gpu(x16.data(), mat.suh, k, xh16.data());
      for (int64_t j = 0; j < k; ++j) row[j] = f16_to_f32(xh16[j]);
    } else {
      for (int64_t j = 0; j < k; ++j) row[j] = x[i * k + j] * f16_to_f32(mat.suh[j]);
      hadamard128(row, k);
    }
  }
  // 2. acc = xh · Ŵ, tile by tile, f32 accumulation in increasing k.
  std::vector<float> acc(static_cast<size_t>(m * w), 0.0f);
  float t[16][16];
  for (int64_t tn = n_begin / 16; tn < n_end / 16; ++tn)
    for (int64_t tk = 0; tk < k / 16; ++tk) {
      decode_tile_f32(mat, tk, tn, t);
      for (int64_t i = 0; i < m; ++i) {
        const float* xr = xh.data() + i * k + tk * 16;
        float* ar = acc.data() + i * w + (tn * 16 - n_begin);
        for (int rr = 0; rr < 16; ++rr)
          for (int c = 0; c < 16; ++c) ar[c] += xr[rr] * t[rr][c];
      }
    }
  // 3. y = H(acc) ⊙ svh + bias.
  std::vector<uint16_t> y16(w);
  for (int64_t i = 0; i < m; ++i) {
    float* a = acc.data() + i * w;
    float* yr = y + i * n + n_begin;
    if (gpu) {
      hadamard128_output_gpu(a, mat.svh + n_begin, w, y16.data());
      for (int64_t j = 0; j < w; ++j)
        yr[j] = f16_to_f32(mat.bias ? f16_add(y16[j], mat.bias[n_begin + j]) : y16[j]);
    } else {
      hadamard128(a, w);
      for (int64_t j = 0; j < w; ++j) {
        yr[j] = a[j] * f16_to_f32(mat.svh[n_begin + j]);
        if (mat.bias) yr[j] += f16_to_f32(mat.bias[n_begin + j]);
      }
    }
  }
}

}  // namespace tandem::exl3
