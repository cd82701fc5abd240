#pragma once
// Row-wise ops of the CPU backend (norms, RoPE, SwiGLU, add, gather, embedding), threaded
// over blocks of rows once a batch is big enough to pay for the hand-off.
#include <cstdint>
#include <vector>

#include "cpu_weights.hpp"
#include "kernels.hpp"
#include "thread_pool.hpp"
#include "views.hpp"

namespace tandem::cpu {

void run_rms_norm(thread_pool& pool, const kernel_table& k, const rows_view& x, const float* w,
                  float eps, const rows_view& out);
// residual += x; out = rms_norm(residual); kept (when not null) = residual.
void run_add_rms_norm(thread_pool& pool, const kernel_table& k, const rows_view& residual,
                      const rows_view& x, const float* w, float eps, const rows_view& out,
                      const rows_view* kept = nullptr);
// out = (x - mean) / sqrt(var + eps) * w + b per row (biased variance, two passes).
void run_layer_norm(thread_pool& pool, const rows_view& x, const float* w, const float* b, float eps,
                    const rows_view& out);
void run_silu_mul(thread_pool& pool, const rows_view& gate, const rows_view& up,
                  const rows_view& out);
void run_add(thread_pool& pool, const rows_view& a, const rows_view& b, const rows_view& out);
void run_gather(thread_pool& pool, const rows_view& x, const int32_t* rows, const rows_view& out);
void run_embed(thread_pool& pool, const cpu_linear& table, const int32_t* ids,
               const rows_view& out);

// cos/sin of every (position, pair) seen so far for one (theta, rotary_dims), computed
// by ref::rope_angle so the CPU rotates exactly as the reference does.
class rope_cache {
 public:
  // Table rows [pos][pair] of cos and sin, valid until the next call; grows to max_pos.
  void prepare(float theta, int rotary_dims, int64_t max_pos);
  const float* cos_row(int64_t pos) const { return cos_.data() + pos * half_; }
  const float* sin_row(int64_t pos) const { return sin_.data() + pos * half_; }

  static constexpr int64_t max_cached_positions = int64_t{1} << 20;

 private:
  float theta_ = 0;
  int half_ = 0;
  int64_t n_pos_ = 0;
  std::vector<float> cos_, sin_;
};

// x: [n, n_heads * head_dim] rows, rotated in place.
void run_rope(thread_pool& pool, const rows_view& x, int64_t n_heads, int64_t head_dim,
              const int32_t* positions, const rope_params& p, rope_cache& cache);

}  // namespace tandem::cpu
