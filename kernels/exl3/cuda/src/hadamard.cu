// The input and output 128-point Hadamard transforms of the EXL3 linear (spec §4), rounded
// exactly as tandem_exl3's hadamard128_input_gpu / hadamard128_output_gpu: one warp per
// 128-chunk of a row, lane t holding elements 4t..4t+3; butterflies over index bits 0-1 in
// registers, then bits 2-6 by shuffles (the upper partner takes lower - upper), in f32.
#include "decode.cuh"
#include "tandem_exl3_cuda/exl3_cuda.hpp"

namespace tandem::exl3::cuda {
namespace {

constexpr float had_scale = 0.088388347648f;  // tandem::exl3::hadamard_scale

__device__ __forceinline__ void butterflies(float v[4], int lane) {
  float a = v[0] + v[1], b = v[0] - v[1], c = v[2] + v[3], d = v[2] - v[3];  // h = 1
  v[0] = a + c, v[2] = a - c, v[1] = b + d, v[3] = b - d;                  // h = 2
#pragma unroll
  for (int m = 1; m < 32; m <<= 1) {  // h = 4 .. 64: partner lane ^ m
    const bool upper = lane & m;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const float o = __shfl_xor_sync(0xffffffffu, v[i], m);
      v[i] = upper ? o - v[i] : v[i] + o;
    }
  }
}

__global__ void __launch_bounds__(256) input_kernel(const float* __restrict__ x, int64_t rows, int64_t in, int64_t k,
                                                    const __half* __restrict__ suh, __half* __restrict__ xh,
                                                    float* __restrict__ zero_acc, int64_t acc_count) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t chunk = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  if (zero_acc != nullptr) {
    const int64_t stride = int64_t{gridDim.x} * blockDim.x;
    for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < acc_count / 4; i += stride)
      reinterpret_cast<float4*>(zero_acc)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
  }
  const int64_t chunks_per_row = k / 128;
  if (chunk >= rows * chunks_per_row) return;
  const int64_t row = chunk / chunks_per_row, col = (chunk % chunks_per_row) * 128 + lane * 4;
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float xv = col + i < in ? x[row * in + col + i] : 0.0f;
    v[i] = __half2float(__hmul_rn(__float2half_rn(xv), suh[col + i]));
  }
  butterflies(v, lane);
  __half2 h0 = __halves2half2(__float2half_rn(v[0] * had_scale), __float2half_rn(v[1] * had_scale));
  __half2 h1 = __halves2half2(__float2half_rn(v[2] * had_scale), __float2half_rn(v[3] * had_scale));
  uint2 o;
  o.x = *reinterpret_cast<uint32_t*>(&h0);
  o.y = *reinterpret_cast<uint32_t*>(&h1);
  *reinterpret_cast<uint2*>(xh + row * k + col) = o;
}

__global__ void __launch_bounds__(256) output_kernel(const float* __restrict__ acc, int64_t rows, int64_t n,
                                                     const __half* __restrict__ svh, const __half* __restrict__ bias,
                                                     const int32_t* __restrict__ col_to_out, int64_t out,
                                                     float* __restrict__ y) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int lane = threadIdx.x & 31;
  const int64_t chunk = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int64_t chunks_per_row = n / 128;
  if (chunk >= rows * chunks_per_row) return;
  const int64_t row = chunk / chunks_per_row, col = (chunk % chunks_per_row) * 128 + lane * 4;
  const float4 a = *reinterpret_cast<const float4*>(acc + row * n + col);
  float v[4] = {a.x, a.y, a.z, a.w};
  butterflies(v, lane);
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    __half h = __hmul_rn(__float2half_rn(v[i] * had_scale), svh[col + i]);  // no fma with the bias
    if (bias != nullptr) h = __hadd(h, bias[col + i]);
    const int64_t c = col_to_out != nullptr ? col_to_out[col + i] : (col + i < out ? col + i : -1);
    if (c >= 0) y[row * out + c] = __half2float(h);
  }
}

unsigned blocks_for_chunks(int64_t rows, int64_t width) {
  return static_cast<unsigned>((rows * (width / 128) * 32 + 255) / 256);
}

}  // namespace

void exl3_input_transform(const dev_exl3& w, const float* x, int64_t rows, int64_t in, __half* xh,
                          float* zero_acc, cudaStream_t stream) {
  if (rows <= 0) return;
  detail::launch_pdl(input_kernel, dim3(blocks_for_chunks(rows, w.k)), dim3(256), 0, stream, x, rows, in, w.k,
                     w.suh, xh, zero_acc, rows * w.n);
}

void exl3_output_transform(const dev_exl3& w, const float* acc, int64_t rows, const int32_t* col_to_out,
                           int64_t out, float* y, cudaStream_t stream) {
  if (rows <= 0) return;
  detail::launch_pdl(output_kernel, dim3(blocks_for_chunks(rows, w.n)), dim3(256), 0, stream, acc, rows, w.n,
                     w.svh, w.bias, col_to_out, out, y);
}

}  // namespace tandem::exl3::cuda
