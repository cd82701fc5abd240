#include "pointwise.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <string>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"
#include "tandem_ref/ops.hpp"

namespace tandem::cpu {
namespace {

// Calls fn(r0, r1) over blocks of rows of about 16k elements each.
template <class F>
void for_rows(thread_pool& pool, int64_t rows, int64_t cols, F fn) {
  const int64_t block = std::max<int64_t>(1, 16384 / std::max<int64_t>(cols, 1));
  pool.parallel_for((rows + block - 1) / block, [&](int64_t b) {
    fn(b * block, std::min(rows, (b + 1) * block));
  });
}

void norm_row(const kernel_table& k, const float* x, const float* w, float eps, int64_t d,
              float* out) {
  const float inv = 1.0f / std::sqrt(k.dot(x, x, d) / static_cast<float>(d) + eps);
  for (int64_t j = 0; j < d; ++j) out[j] = x[j] * inv * w[j];
}

}  // namespace

void run_rms_norm(thread_pool& pool, const kernel_table& k, const rows_view& x, const float* w,
                  float eps, const rows_view& out) {
  for_rows(pool, x.rows, x.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) norm_row(k, x.row(r), w, eps, x.cols, out.row(r));
  });
}

void run_add_rms_norm(thread_pool& pool, const kernel_table& k, const rows_view& residual,
                      const rows_view& x, const float* w, float eps, const rows_view& out,
                      const rows_view* kept) {
  for_rows(pool, x.rows, x.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      float* res = residual.row(r);
      const float* xr = x.row(r);
      for (int64_t j = 0; j < x.cols; ++j) res[j] += xr[j];
      if (kept) std::memcpy(kept->row(r), res, static_cast<size_t>(x.cols) * sizeof(float));
      norm_row(k, res, w, eps, x.cols, out.row(r));
    }
  });
}

void run_layer_norm(thread_pool& pool, const rows_view& x, const float* w, const float* b, float eps,
                    const rows_view& out) {
  const int64_t d = x.cols;
  for_rows(pool, x.rows, d, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float* xr = x.row(r);
      float* o = out.row(r);
      float sum = 0.0f;
      for (int64_t j = 0; j < d; ++j) sum += xr[j];
      const float mean = sum / static_cast<float>(d);
      float var = 0.0f;
      for (int64_t j = 0; j < d; ++j) var += (xr[j] - mean) * (xr[j] - mean);
      const float inv = 1.0f / std::sqrt(var / static_cast<float>(d) + eps);
      for (int64_t j = 0; j < d; ++j) o[j] = (xr[j] - mean) * inv * w[j] + b[j];
    }
  });
}

void run_silu_mul(thread_pool& pool, const rows_view& gate, const rows_view& up,
                  const rows_view& out) {
  for_rows(pool, gate.rows, gate.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *g = gate.row(r), *u = up.row(r);
      float* o = out.row(r);
      for (int64_t j = 0; j < gate.cols; ++j) o[j] = g[j] / (1.0f + std::exp(-g[j])) * u[j];
    }
  });
}

void run_add(thread_pool& pool, const rows_view& a, const rows_view& b, const rows_view& out) {
  for_rows(pool, a.rows, a.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const float *ar = a.row(r), *br = b.row(r);
      float* o = out.row(r);
      for (int64_t j = 0; j < a.cols; ++j) o[j] = ar[j] + br[j];
    }
  });
}

void run_gather(thread_pool& pool, const rows_view& x, const int32_t* rows, const rows_view& out) {
  for (int64_t i = 0; i < out.rows; ++i) {
    if (rows[i] < 0 || rows[i] >= x.rows) {
      throw error("backend.cpu gather_rows: row " + std::to_string(rows[i]) + " at index " +
                  std::to_string(i) + " is outside [0, " + std::to_string(x.rows) + ")");
    }
  }
  for_rows(pool, out.rows, out.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      std::memmove(out.row(i), x.row(rows[i]), static_cast<size_t>(out.cols) * sizeof(float));
    }
  });
}

void run_embed(thread_pool& pool, const cpu_linear& table, const int32_t* ids,
               const rows_view& out) {
  const int64_t vocab = table.out_features();
  for (int64_t i = 0; i < out.rows; ++i) {
    if (ids[i] < 0 || ids[i] >= vocab) {
      throw error("backend.cpu embed: token id " + std::to_string(ids[i]) + " at row " +
                  std::to_string(i) + " is outside the vocabulary [0, " + std::to_string(vocab) + ")");
    }
  }
  for_rows(pool, out.rows, out.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      dequantize_row(table.storage_type(), table.row(ids[i]), out.row(i), out.cols);
    }
  });
}

void rope_cache::prepare(float theta, int rotary_dims, int64_t max_pos) {
  const int half = rotary_dims / 2;
  if (theta != theta_ || half != half_) {
    theta_ = theta;
    half_ = half;
    n_pos_ = 0;
  }
  if (max_pos < n_pos_) return;
  const int64_t n = std::max(max_pos + 1, std::min<int64_t>(n_pos_ * 2, max_cached_positions));
  cos_.resize(static_cast<size_t>(n * half));
  sin_.resize(static_cast<size_t>(n * half));
  for (int64_t p = n_pos_; p < n; ++p) {
    for (int i = 0; i < half; ++i) {
      ref::rope_angle(theta, rotary_dims, p, i, &cos_[p * half + i], &sin_[p * half + i]);
    }
  }
  n_pos_ = n;
}

void run_rope(thread_pool& pool, const rows_view& x, int64_t n_heads, int64_t head_dim,
              const int32_t* positions, const rope_params& p, rope_cache& cache) {
  const int rot = p.rotary_dims == 0 ? static_cast<int>(head_dim) : p.rotary_dims;
  if (rot <= 0 || rot > head_dim || rot % 2 != 0) {
    throw error("backend.cpu rope: rotary_dims " + std::to_string(p.rotary_dims) +
                " must be even and within head_dim " + std::to_string(head_dim));
  }
  int64_t max_pos = 0;
  for (int64_t t = 0; t < x.rows; ++t) {
    if (positions[t] < 0 || positions[t] >= rope_cache::max_cached_positions) {
      throw error("backend.cpu rope: position " + std::to_string(positions[t]) + " at row " +
                  std::to_string(t) + " is outside [0, 2^20)");
    }
    max_pos = std::max<int64_t>(max_pos, positions[t]);
  }
  cache.prepare(p.theta, rot, max_pos);
  const int half = rot / 2;
  const int64_t a_step = p.neox ? 1 : 2, b_off = p.neox ? half : 1;
  for_rows(pool, x.rows, x.cols, [&](int64_t r0, int64_t r1) {
    for (int64_t t = r0; t < r1; ++t) {
      const float *c = cache.cos_row(positions[t]), *s = cache.sin_row(positions[t]);
      for (int64_t h = 0; h < n_heads; ++h) {
        float* v = x.row(t) + h * head_dim;
        for (int i = 0; i < half; ++i) {
          float* a = v + i * a_step;
          const float x0 = a[0], x1 = a[b_off];
          a[0] = x0 * c[i] - x1 * s[i];
          a[b_off] = x0 * s[i] + x1 * c[i];
        }
      }
    }
  });
}

}  // namespace tandem::cpu
