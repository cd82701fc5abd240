// Row-wise and elementwise launchers: norms, RoPE, SiLU gate, add, gather, conversions.
#include <cmath>
#include <cstdlib>
#include <string>

#include "common.cuh"
#include "norm_row.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

using detail::blocks_for;

// One block per row. The sum of squares is a tree sum (the reference sums in order; both
// are fp32, so they differ by rounding only). With x, the sum residual + x is stored back,
// and to `kept` too when it is given (a model's hidden-state tap: no add launch of its own).
// The weight (a model parameter, never written by the kernels of a step) is requested
// before the kernel waits for its predecessor, so its load is not one more round trip after
// the sum: a thread's first value (all of them for d <= 1024, the decode norms) comes from
// that early load. The row's arithmetic is norm_row.cuh's, which the q8 GEMV's add_rms_norm
// epilogue shares (blockDim.x = norm_threads(d): each thread is its own virtual thread).
__global__ void rms_norm_kernel(float* residual, const float* x, const float* w, float eps,
                                int64_t d, float* out, float* kept) {
  __shared__ float red[32];
  const float w0 = threadIdx.x < d ? __ldg(w + threadIdx.x) : 0.0f;
  detail::pdl_wait();
  detail::pdl_trigger();
  const int64_t row = blockIdx.x;
  detail::rms_norm_row<1>(residual + row * d, x ? x + row * d : nullptr, kept ? kept + row * d : nullptr, w, w0, eps, d,
                          out + row * d, static_cast<int>(blockDim.x), red, detail::load_plain{});
}

using detail::norm_threads;

// One thread per (token, pair): the angle in double, as ref::rope_angle.
__global__ void rope_kernel(float* x, int64_t n, int64_t heads, int64_t head_dim,
                            const int32_t* positions, double theta, int rot, bool neox) {
  const int half = rot / 2;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= n * half) return;
  const int64_t t = i / half;
  const int p = static_cast<int>(i % half);
  const double angle = static_cast<double>(positions[t]) * pow(theta, -2.0 * p / rot);
  const float c = static_cast<float>(cos(angle)), s = static_cast<float>(sin(angle));
  const int64_t a = neox ? p : 2 * p, b = neox ? p + half : 2 * p + 1;
  for (int64_t h = 0; h < heads; ++h) {
    float* v = x + (t * heads + h) * head_dim;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t count, float* out) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= count) return;
  const float g = gate[i];
  out[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void add_kernel(const float* a, const float* b, int64_t count, float* out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < count) out[i] = a[i] + b[i];
}

__global__ void gather_kernel(const float* x, int64_t n, int64_t d, int64_t ldx, const int32_t* rows,
                              float* out, int64_t ldo) {
  const int64_t i = blockIdx.y;
  const int32_t r = rows[i];
  for (int64_t j = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; j < d; j += gridDim.x * int64_t{blockDim.x})
    out[i * ldo + j] = r >= 0 && r < n ? x[r * ldx + j] : nanf("");
}

__global__ void f32_to_f16_kernel(const float* x, int64_t count, __half* out) {
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i < count) out[i] = __float2half_rn(x[i]);
}

}  // namespace


void rms_norm(const float* x, const float* w, float eps, int64_t n, int64_t d, float* out,
              cudaStream_t stream) {
  if (n == 0) return;
  // Without a residual the kernel only reads `residual`: cast away const for the shared kernel.
  detail::launch_pdl(rms_norm_kernel, dim3(n), dim3(norm_threads(d)), 0, stream, const_cast<float*>(x),
                     static_cast<const float*>(nullptr), w, eps, d, out, static_cast<float*>(nullptr));
}

void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t n, int64_t d,
                  float* out, float* kept, cudaStream_t stream) {
  if (n == 0) return;
  detail::launch_pdl(rms_norm_kernel, dim3(n), dim3(norm_threads(d)), 0, stream, residual, x, w, eps, d, out, kept);
}

void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions,
          float theta, int rotary_dims, bool neox, cudaStream_t stream) {
  const int rot = rotary_dims == 0 ? static_cast<int>(head_dim) : rotary_dims;
  const int64_t items = n * (rot / 2);
  if (items == 0) return;
  rope_kernel<<<blocks_for(items, 256), 256, 0, stream>>>(x, n, heads, head_dim, positions,
                                                          static_cast<double>(theta), rot, neox);
}

void silu_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream) {
  if (count) detail::launch_pdl(silu_mul_kernel, dim3(blocks_for(count, 256)), dim3(256), 0, stream, gate, up, count, out);
}

void add(const float* a, const float* b, int64_t count, float* out, cudaStream_t stream) {
  if (count) add_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(a, b, count, out);
}

void gather_rows(const float* x, int64_t n, int64_t d, int64_t x_stride, const int32_t* rows, int64_t m, float* out,
                 int64_t out_stride, cudaStream_t stream) {
  if (m == 0 || d == 0) return;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks_for(d, 256), 64)),
                  static_cast<unsigned>(m));
  gather_kernel<<<grid, 256, 0, stream>>>(x, n, d, x_stride, rows, out, out_stride);
}

void f32_to_f16(const float* x, int64_t count, __half* out, cudaStream_t stream) {
  if (count) f32_to_f16_kernel<<<blocks_for(count, 256), 256, 0, stream>>>(x, count, out);
}

}  // namespace tandem::cuda
