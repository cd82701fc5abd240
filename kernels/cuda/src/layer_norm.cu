// Row norms over strided rows: layer_norm (the DSA indexer's key norm), and rms_norm for
// views whose rows are not packed (MLA normalises the latent c in place inside kv_a's
// [c | k_rope] rows). One block per row, fp32; layer_norm takes two passes (mean, then the
// centred variance) as backend.cpu's run_layer_norm; the row is re-read from L1/L2 rather
// than staged. Each thread writes only the elements it read, so out may be x.
#include "common.cuh"
#include "tandem_cuda/mla.hpp"

namespace tandem::cuda {
namespace {

constexpr int threads = 256;

__global__ void __launch_bounds__(threads)
    layer_norm_kernel(const float* x, int64_t xs, const float* __restrict__ w, const float* __restrict__ b,
                      float eps, int64_t d, float* out, int64_t os) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * xs;
  float* o = out + blockIdx.x * os;
  float s = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += threads) s += xr[j];
  const float mean = detail::block_sum(s, red) / static_cast<float>(d);
  float v = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += threads) {
    const float c = xr[j] - mean;
    v = fmaf(c, c, v);
  }
  const float var = detail::block_sum(v, red);
  const float inv = 1.0f / sqrtf(var / static_cast<float>(d) + eps);
  for (int64_t j = threadIdx.x; j < d; j += threads) o[j] = (xr[j] - mean) * inv * w[j] + b[j];
}

// As the packed rms_norm kernel (pointwise.cu): a tree sum of squares, then x * inv * w.
__global__ void __launch_bounds__(threads)
    rms_norm_rows_kernel(const float* x, int64_t xs, const float* __restrict__ w, float eps, int64_t d, float* out,
                         int64_t os) {
  __shared__ float red[32];
  const float* xr = x + blockIdx.x * xs;
  float* o = out + blockIdx.x * os;
  float ss = 0.0f;
  for (int64_t j = threadIdx.x; j < d; j += threads) ss += xr[j] * xr[j];
  ss = detail::block_sum(ss, red);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int64_t j = threadIdx.x; j < d; j += threads) o[j] = xr[j] * inv * w[j];
}

}  // namespace

void layer_norm(const float* x, int64_t x_stride, const float* w, const float* b, float eps, int64_t n,
                int64_t d, float* out, int64_t out_stride, cudaStream_t stream) {
  if (n == 0 || d == 0) return;
  layer_norm_kernel<<<static_cast<unsigned>(n), threads, 0, stream>>>(x, x_stride, w, b, eps, d, out, out_stride);
}

void rms_norm_rows(const float* x, int64_t x_stride, const float* w, float eps, int64_t n, int64_t d, float* out,
                   int64_t out_stride, cudaStream_t stream) {
  if (n == 0 || d == 0) return;
  rms_norm_rows_kernel<<<static_cast<unsigned>(n), threads, 0, stream>>>(x, x_stride, w, eps, d, out, out_stride);
}

}  // namespace tandem::cuda
