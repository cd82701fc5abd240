#pragma once
// Device side of the 128-point Hadamard transforms around the EXL3 linear (hadamard.cu),
// shared with the int8-activation GEMV's input transform (gemv_q8.cu): one warp per
// 128-chunk of a row, lane t holding elements 4t..4t+3.
#include "decode.cuh"

namespace tandem::exl3::cuda::detail {

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

// This thread's place in a [rows][width] transform, one warp per 128-chunk of a row: lane
// `lane` holds columns col..col+3 of `row`; false past the last chunk.
struct chunk_pos {
  int lane;
  int64_t row, col;
};
__device__ __forceinline__ bool chunk_of(int64_t rows, int64_t width, chunk_pos& c) {
  c.lane = threadIdx.x & 31;
  const int64_t chunk = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int64_t per_row = width / 128;
  if (chunk >= rows * per_row) return false;
  c.row = chunk / per_row, c.col = (chunk % per_row) * 128 + c.lane * 4;
  return true;
}

// 256-thread blocks of a [rows][width] transform, one warp per 128-chunk (chunk_of).
inline unsigned blocks_for_chunks(int64_t rows, int64_t width) {
  return static_cast<unsigned>((rows * (width / 128) * 32 + 255) / 256);
}

// Grid-stride zeroing of acc[0 .. count) (count a multiple of 4): the input transforms clear
// the GEMV's accumulators in the same launch.
__device__ __forceinline__ void zero_grid(float* __restrict__ acc, int64_t count) {
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count / 4; i += stride)
    reinterpret_cast<float4*>(acc)[i] = make_float4(0.f, 0.f, 0.f, 0.f);
}

// Lane `lane`'s four elements of x̂ = fp16(Hadamard128(fp16(x) ⊙ suh) / sqrt(128)) for the
// chunk at `col` (= chunk start + 4 lane) of `row`, each fp16-rounded exactly as
// tandem_exl3's hadamard128_input_gpu, returned as f32; columns >= in are taken as 0.
__device__ __forceinline__ void input_rotate(const float* __restrict__ x, int64_t row, int64_t in, int64_t col,
                                             const __half* __restrict__ suh, int lane, float v[4]) {
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const float xv = col + i < in ? x[row * in + col + i] : 0.0f;
    v[i] = __half2float(__hmul_rn(__float2half_rn(xv), suh[col + i]));
  }
  butterflies(v, lane);
#pragma unroll
  for (int i = 0; i < 4; ++i) v[i] = __half2float(__float2half_rn(v[i] * had_scale));
}

}  // namespace tandem::exl3::cuda::detail
