// The input and output 128-point Hadamard transforms of the EXL3 linear (spec §4), rounded
// exactly as tandem_exl3's hadamard128_input_gpu / hadamard128_output_gpu: one warp per
// 128-chunk of a row, lane t holding elements 4t..4t+3; butterflies over index bits 0-1 in
// registers, then bits 2-6 by shuffles (the upper partner takes lower - upper), in f32.
#include "hadamard.cuh"
#include "tandem_exl3_cuda/exl3_cuda.hpp"

namespace tandem::exl3::cuda {
namespace {

using detail::butterflies;
using detail::had_scale;

__global__ void __launch_bounds__(256) input_kernel(const float* __restrict__ x, int64_t rows, int64_t in, int64_t k,
                                                    const __half* __restrict__ suh, __half* __restrict__ xh,
                                                    float* __restrict__ zero_acc, int64_t acc_count) {
  detail::pdl_wait();
  detail::pdl_trigger();
  if (zero_acc != nullptr) detail::zero_grid(zero_acc, acc_count);
  detail::chunk_pos c;
  if (!detail::chunk_of(rows, k, c)) return;
  const int lane = c.lane;
  const int64_t row = c.row, col = c.col;
  float v[4];
  detail::input_rotate(x, row, in, col, suh, lane, v);
  // v is fp16-rounded already: converting back is exact.
  __half2 h0 = __floats2half2_rn(v[0], v[1]);
  __half2 h1 = __floats2half2_rn(v[2], v[3]);
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
  detail::chunk_pos c;
  if (!detail::chunk_of(rows, n, c)) return;
  const int lane = c.lane;
  const int64_t row = c.row, col = c.col;
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

}  // namespace

void exl3_input_transform(const dev_exl3& w, const float* x, int64_t rows, int64_t in, __half* xh,
                          float* zero_acc, cudaStream_t stream) {
  if (rows <= 0) return;
  detail::launch_pdl(input_kernel, dim3(detail::blocks_for_chunks(rows, w.k)), dim3(256), 0, stream, x, rows, in, w.k,
                     w.suh, xh, zero_acc, rows * w.n);
}

void exl3_output_transform(const dev_exl3& w, const float* acc, int64_t rows, const int32_t* col_to_out,
                           int64_t out, float* y, cudaStream_t stream) {
  if (rows <= 0) return;
  detail::launch_pdl(output_kernel, dim3(detail::blocks_for_chunks(rows, w.n)), dim3(256), 0, stream, acc, rows, w.n,
                     w.svh, w.bias, col_to_out, out, y);
}

}  // namespace tandem::exl3::cuda
