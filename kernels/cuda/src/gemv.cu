// Quantized linears for decode (GEMV reading the blocks), embedding rows, and the f16
// dequantization that feeds the prefill GEMM.
//
// Dequantization is exactly the reference's (d * q + m in fp32, no fused multiply-add), so
// embeddings match bit for bit and linears differ only in summation order.
#include <stdexcept>

#include "common.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

using detail::blocks_for;

// The 32 weights of block b of a row, as the reference dequantizes them.
template <wformat F>
__device__ __forceinline__ void load_block(const dev_matrix& w, int64_t row, int64_t b, float* v) {
  const int64_t nb = w.in / 32;
  if constexpr (F == wformat::q4_1) {
    const uint4 q = static_cast<const uint4*>(w.qs)[row * nb + b];
    const float2 dm = __half22float2(static_cast<const __half2*>(w.scales)[row * nb + b]);
    const uint32_t words[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
    for (int i = 0; i < 16; ++i) {
      const uint32_t byte = (words[i / 4] >> (8 * (i % 4))) & 0xffu;
      v[i] = __fadd_rn(__fmul_rn(dm.x, static_cast<float>(byte & 0xfu)), dm.y);
      v[i + 16] = __fadd_rn(__fmul_rn(dm.x, static_cast<float>(byte >> 4)), dm.y);
    }
  } else if constexpr (F == wformat::q8_0) {
    const uint4* q = static_cast<const uint4*>(w.qs) + (row * nb + b) * 2;
    const uint4 q0 = q[0], q1 = q[1];
    const float d = __half2float(static_cast<const __half*>(w.scales)[row * nb + b]);
    const uint32_t words[8] = {q0.x, q0.y, q0.z, q0.w, q1.x, q1.y, q1.z, q1.w};
#pragma unroll
    for (int i = 0; i < 32; ++i) {
      const auto s = static_cast<int8_t>((words[i / 4] >> (8 * (i % 4))) & 0xffu);
      v[i] = __fmul_rn(d, static_cast<float>(s));
    }
  } else {
    const float4* src = reinterpret_cast<const float4*>(static_cast<const float*>(w.qs) + row * w.in + b * 32);
#pragma unroll
    for (int i = 0; i < 8; ++i) {
      const float4 f = src[i];
      v[4 * i] = f.x, v[4 * i + 1] = f.y, v[4 * i + 2] = f.z, v[4 * i + 3] = f.w;
    }
  }
}

// One warp per `rows_per_warp` output rows; lane l takes blocks l, l + 32, ... of each.
// A lane dequantizes its block of every row first (several loads in flight), then reads
// each token's 32 x values once (through L1: x is a few KB, shared by every warp) for all
// of its rows.
constexpr int rows_per_warp = 4;
constexpr int rows_per_block = 4 * rows_per_warp;

// accumulate: y += the result (each output read and written by one lane only).
template <wformat F, int NT>
__global__ void __launch_bounds__(128) gemv_kernel(dev_matrix w, const float* __restrict__ x,
                                                   float* __restrict__ y, bool accumulate) {
  const int64_t row0 = (blockIdx.x * 4LL + (threadIdx.x >> 5)) * rows_per_warp;
  const int lane = threadIdx.x & 31;
  if (row0 >= w.out) return;
  float acc[rows_per_warp][NT];
#pragma unroll
  for (int r = 0; r < rows_per_warp; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  const int64_t nb = w.in / 32;
  for (int64_t b = lane; b < nb; b += 32) {
    float v[rows_per_warp][32];
#pragma unroll
    for (int r = 0; r < rows_per_warp; ++r) {
      if (row0 + r < w.out) {
        load_block<F>(w, row0 + r, b, v[r]);
      } else {
#pragma unroll
        for (int j = 0; j < 32; ++j) v[r][j] = 0.0f;
      }
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float4* xr = reinterpret_cast<const float4*>(x + t * w.in + b * 32);
#pragma unroll
      for (int i = 0; i < 8; ++i) {
        const float4 xv = __ldg(xr + i);
#pragma unroll
        for (int r = 0; r < rows_per_warp; ++r) {
          acc[r][t] = fmaf(v[r][4 * i], xv.x, acc[r][t]);
          acc[r][t] = fmaf(v[r][4 * i + 1], xv.y, acc[r][t]);
          acc[r][t] = fmaf(v[r][4 * i + 2], xv.z, acc[r][t]);
          acc[r][t] = fmaf(v[r][4 * i + 3], xv.w, acc[r][t]);
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < rows_per_warp; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = detail::warp_sum(acc[r][t]);
      if (lane == 0 && row0 + r < w.out) {
        float* o = detail::out_at(w, y, NT, t, row0 + r);
        *o = accumulate ? *o + s : s;
      }
    }
  }
}

template <wformat F>
void gemv_n(const dev_matrix& w, const float* x, int64_t n, float* y, bool acc, cudaStream_t s) {
  const unsigned grid = blocks_for(w.out, rows_per_block);
  switch (n) {
    case 1: gemv_kernel<F, 1><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    case 2: gemv_kernel<F, 2><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    case 3: gemv_kernel<F, 3><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    case 4: gemv_kernel<F, 4><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    case 5: gemv_kernel<F, 5><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    case 6: gemv_kernel<F, 6><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    case 7: gemv_kernel<F, 7><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    case 8: gemv_kernel<F, 8><<<grid, 128, 0, s>>>(w, x, y, acc); break;
    default: throw std::invalid_argument("gemv: more than 8 token rows");
  }
}

// One thread per (row, block): 32 weights out.
template <wformat F>
__global__ void dequant_kernel(dev_matrix w, __half* out) {
  const int64_t nb = w.in / 32;
  const int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x;
  if (i >= w.out * nb) return;
  float v[32];
  load_block<F>(w, i / nb, i % nb, v);
  __half2* dst = reinterpret_cast<__half2*>(out + i * 32);
#pragma unroll
  for (int j = 0; j < 16; ++j) dst[j] = __floats2half2_rn(v[2 * j], v[2 * j + 1]);
}

template <wformat F>
__global__ void embed_kernel(dev_matrix w, const int32_t* ids, float* out) {
  const int64_t r = blockIdx.y;
  const int32_t id = ids[r];
  const int64_t nb = w.in / 32;
  for (int64_t b = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; b < nb; b += gridDim.x * int64_t{blockDim.x}) {
    float v[32];
    if (id >= 0 && id < w.out) {
      load_block<F>(w, id, b, v);
    } else {
#pragma unroll
      for (int j = 0; j < 32; ++j) v[j] = nanf("");
    }
    float4* dst = reinterpret_cast<float4*>(out + r * w.in + b * 32);
#pragma unroll
    for (int j = 0; j < 8; ++j) dst[j] = make_float4(v[4 * j], v[4 * j + 1], v[4 * j + 2], v[4 * j + 3]);
  }
}

}  // namespace

dev_matrix segment_of(const dev_matrix& m, int i) {
  dev_matrix r = m;
  const int64_t start = m.seg[i], nb = m.in / 32;
  r.out = m.seg[i + 1] - start;
  r.n_segs = 1;
  r.seg[0] = 0, r.seg[1] = r.out;
  switch (m.format) {
    case wformat::q4_1:
      r.qs = static_cast<const uint8_t*>(m.qs) + start * nb * 16;
      r.scales = static_cast<const uint32_t*>(m.scales) + start * nb;
      break;
    case wformat::q8_0:
      r.qs = static_cast<const uint8_t*>(m.qs) + start * nb * 32;
      r.scales = static_cast<const uint16_t*>(m.scales) + start * nb;
      break;
    case wformat::f32: r.qs = static_cast<const float*>(m.qs) + start * m.in; break;
  }
  return r;
}

void gemv(const dev_matrix& w, const float* x, int64_t n, float* y, bool accumulate, cudaStream_t stream) {
  if (n == 0 || w.out == 0) return;
  switch (w.format) {
    case wformat::q4_1: gemv_n<wformat::q4_1>(w, x, n, y, accumulate, stream); break;
    case wformat::q8_0: gemv_n<wformat::q8_0>(w, x, n, y, accumulate, stream); break;
    case wformat::f32: gemv_n<wformat::f32>(w, x, n, y, accumulate, stream); break;
  }
}

void gemv(const dev_matrix& w, const float* x, int64_t n, float* y, cudaStream_t stream) {
  gemv(w, x, n, y, false, stream);
}

void dequantize_f16(const dev_matrix& w, __half* out, cudaStream_t stream) {
  const int64_t items = w.out * (w.in / 32);
  if (items == 0) return;
  const unsigned grid = blocks_for(items, 256);
  switch (w.format) {
    case wformat::q4_1: dequant_kernel<wformat::q4_1><<<grid, 256, 0, stream>>>(w, out); break;
    case wformat::q8_0: dequant_kernel<wformat::q8_0><<<grid, 256, 0, stream>>>(w, out); break;
    case wformat::f32: dequant_kernel<wformat::f32><<<grid, 256, 0, stream>>>(w, out); break;
  }
}

void embed(const dev_matrix& table, const int32_t* ids, int64_t n, float* out, cudaStream_t stream) {
  if (n == 0) return;
  const int64_t nb = table.in / 32;
  const dim3 grid(static_cast<unsigned>(std::min<int64_t>(blocks_for(nb, 64), 16)), static_cast<unsigned>(n));
  switch (table.format) {
    case wformat::q4_1: embed_kernel<wformat::q4_1><<<grid, 64, 0, stream>>>(table, ids, out); break;
    case wformat::q8_0: embed_kernel<wformat::q8_0><<<grid, 64, 0, stream>>>(table, ids, out); break;
    case wformat::f32: embed_kernel<wformat::f32><<<grid, 64, 0, stream>>>(table, ids, out); break;
  }
}

}  // namespace tandem::cuda
