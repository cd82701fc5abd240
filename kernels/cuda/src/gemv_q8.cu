// Decode linears with 8-bit activations: x is quantized to q8 blocks exactly as
// backend.cpu's quantize_q8 does (d = amax / 127, q = rint(x / d), s = d * sum q), and
// each weight block is dotted with dp4a (4 products per instruction), as backend.cpu's
// default linear computes it. Per Q4_1 block of 32 weights a lane issues 8 dp4a and a
// handful of bit operations, against ~100 float instructions for the f32 path, so the
// kernel can stream weights at close to the memory bandwidth.
//
// Small inputs (in <= staged_max_in) are quantized by every block into shared memory
// (no extra launch: decode is launch-bound); larger ones once into global scratch first.
#include <stdexcept>

#include "common.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

using detail::blocks_for;

constexpr int threads = 128;
constexpr int rows_per_warp = 2;
constexpr int rows_per_block = threads / 32 * rows_per_warp;
constexpr int64_t staged_max_in = 4096;

__device__ __forceinline__ int warp_sum_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Warp `warp` of `nwarps` quantizes blocks warp, warp + nwarps, ... of x [n, in]; four
// blocks' loads are issued before any of their reductions.
__device__ void quantize_blocks(const float* __restrict__ x, int64_t n, int64_t in, int8_t* xq, float2* ds,
                                int warp, int nwarps, int lane) {
  const int64_t nb = in / 32, total = n * nb;
  for (int64_t i0 = warp; i0 < total; i0 += 4 * int64_t{nwarps}) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * int64_t{nwarps};
      v[u] = i < total ? x[(i / nb) * in + (i % nb) * 32 + lane] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * int64_t{nwarps};
      if (i >= total) break;  // warp-uniform
      const float amax = detail::warp_max(fabsf(v[u]));
      const float d = __fdiv_rn(amax, 127.0f);
      const float id = d > 0.0f ? __frcp_rn(d) : 0.0f;
      const int q = max(-127, min(127, __float2int_rn(__fmul_rn(v[u], id))));
      xq[(i / nb) * in + (i % nb) * 32 + lane] = static_cast<int8_t>(q);
      const int sum = warp_sum_int(q);
      if (lane == 0) ds[i] = make_float2(d, __fmul_rn(d, static_cast<float>(sum)));
    }
  }
}

__global__ void quantize_kernel(const float* x, int64_t n, int64_t in, int8_t* xq, float2* ds) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int nwarps = gridDim.x * (blockDim.x / 32);
  quantize_blocks(x, n, in, xq, ds, blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, nwarps, threadIdx.x & 31);
}


template <wformat F>
struct wblock {
  uint4 q0, q1;   // q4_1: q0 holds 32 nibbles; q8_0: q0, q1 hold 32 int8
  float d, m;
};

template <wformat F>
__device__ __forceinline__ wblock<F> load_wblock(const dev_matrix& w, int64_t row, int64_t b, int64_t nb) {
  wblock<F> r;
  const int64_t i = row * nb + b;
  if constexpr (F == wformat::q4_1) {
    r.q0 = __ldcs(static_cast<const uint4*>(w.qs) + i);  // read once: keep it out of the caches
    const __half2 dm = __ldcs(static_cast<const __half2*>(w.scales) + i);
    r.d = __low2float(dm), r.m = __high2float(dm);
  } else {
    const uint4* q = static_cast<const uint4*>(w.qs) + i * 2;
    r.q0 = __ldcs(q), r.q1 = __ldcs(q + 1);
    r.d = __half2float(__ldcs(static_cast<const __half*>(w.scales) + i)), r.m = 0.0f;
  }
  return r;
}

template <wformat F>
__device__ __forceinline__ int dot_block(const wblock<F>& wb, const int4& x0, const int4& x1) {
  if constexpr (F == wformat::q4_1) {
    // Byte j holds q[j] (low nibble) and q[j + 16] (high nibble).
    const uint32_t w[4] = {wb.q0.x, wb.q0.y, wb.q0.z, wb.q0.w};
    const int xl[4] = {x0.x, x0.y, x0.z, x0.w}, xh[4] = {x1.x, x1.y, x1.z, x1.w};
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s = __dp4a(static_cast<int>(w[k] & 0x0f0f0f0fu), xl[k], s);
      s = __dp4a(static_cast<int>((w[k] >> 4) & 0x0f0f0f0fu), xh[k], s);
    }
    return s;
  } else {
    const int w[8] = {static_cast<int>(wb.q0.x), static_cast<int>(wb.q0.y), static_cast<int>(wb.q0.z),
                      static_cast<int>(wb.q0.w), static_cast<int>(wb.q1.x), static_cast<int>(wb.q1.y),
                      static_cast<int>(wb.q1.z), static_cast<int>(wb.q1.w)};
    const int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    int s = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) s = __dp4a(w[k], xs[k], s);
    return s;
  }
}

// Block = 4 warps x 2 rows. STAGED: x (f32) is quantized into shared memory first;
// else xq/ds are the global quantized activations.
template <wformat F, int NT, bool STAGED>
__global__ void __launch_bounds__(threads) gemv_q8_kernel(dev_matrix w, const float* __restrict__ x,
                                                          const int8_t* __restrict__ gxq,
                                                          const float2* __restrict__ gds, float* __restrict__ y) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t nb = w.in / 32;
  const int64_t row0 = (blockIdx.x * int64_t{threads / 32} + warp) * rows_per_warp;
  // The first weight blocks are requested before the activations are quantized, so their
  // DRAM latency overlaps that work.
  wblock<F> wb[rows_per_warp];
#pragma unroll
  for (int r = 0; r < rows_per_warp; ++r)
    if (row0 + r < w.out && lane < nb) wb[r] = load_wblock<F>(w, row0 + r, lane, nb);
  detail::pdl_wait();  // x (and the scratch it was quantized into) come from earlier kernels
  detail::pdl_trigger();
  const int8_t* xq = gxq;
  const float2* ds = gds;
  if constexpr (STAGED) {
    auto* sq = reinterpret_cast<int8_t*>(smem);
    auto* sds = reinterpret_cast<float2*>(smem + NT * w.in);
    quantize_blocks(x, NT, w.in, sq, sds, warp, threads / 32, lane);
    __syncthreads();
    xq = sq, ds = sds;
  }
  if (row0 >= w.out) return;
  float acc[rows_per_warp][NT];
#pragma unroll
  for (int r = 0; r < rows_per_warp; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
  for (int64_t b = lane; b < nb; b += 32) {
    if (b != lane) {
#pragma unroll
      for (int r = 0; r < rows_per_warp; ++r)
        if (row0 + r < w.out) wb[r] = load_wblock<F>(w, row0 + r, b, nb);
    }
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const int4* xp = reinterpret_cast<const int4*>(xq + t * w.in + b * 32);
      const int4 x0 = xp[0], x1 = xp[1];
      const float2 dx = ds[t * nb + b];
#pragma unroll
      for (int r = 0; r < rows_per_warp; ++r) {
        if (row0 + r < w.out) {
          const float dot = static_cast<float>(dot_block<F>(wb[r], x0, x1));
          acc[r][t] += wb[r].d * dx.x * dot + wb[r].m * dx.y;
        }
      }
    }
  }
#pragma unroll
  for (int r = 0; r < rows_per_warp; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      const float s = detail::warp_sum(acc[r][t]);
      if (lane == 0 && row0 + r < w.out) *detail::out_at(w, y, NT, t, row0 + r) = s;
    }
  }
}

template <wformat F, int NT>
void launch_nt(const dev_matrix& w, const float* x, float* y, const int8_t* xq, const float2* ds, bool staged,
               cudaStream_t s) {
  const unsigned grid = blocks_for(w.out, rows_per_block);
  if (staged) {
    const size_t smem = static_cast<size_t>(NT * w.in) + static_cast<size_t>(NT * (w.in / 32)) * sizeof(float2);
    detail::launch_pdl(gemv_q8_kernel<F, NT, true>, dim3(grid), dim3(threads), smem, s, w, x,
                       static_cast<const int8_t*>(nullptr), static_cast<const float2*>(nullptr), y);
  } else {
    detail::launch_pdl(gemv_q8_kernel<F, NT, false>, dim3(grid), dim3(threads), 0, s, w,
                       static_cast<const float*>(nullptr), xq, ds, y);
  }
}

template <wformat F>
void launch(const dev_matrix& w, const float* x, int64_t n, float* y, const int8_t* xq, const float2* ds,
            bool staged, cudaStream_t s) {
  switch (n) {
    case 1: launch_nt<F, 1>(w, x, y, xq, ds, staged, s); break;
    case 2: launch_nt<F, 2>(w, x, y, xq, ds, staged, s); break;
    case 3: launch_nt<F, 3>(w, x, y, xq, ds, staged, s); break;
    case 4: launch_nt<F, 4>(w, x, y, xq, ds, staged, s); break;
    case 5: launch_nt<F, 5>(w, x, y, xq, ds, staged, s); break;
    case 6: launch_nt<F, 6>(w, x, y, xq, ds, staged, s); break;
    case 7: launch_nt<F, 7>(w, x, y, xq, ds, staged, s); break;
    case 8: launch_nt<F, 8>(w, x, y, xq, ds, staged, s); break;
    default: throw std::invalid_argument("gemv_q8: more than 8 token rows");
  }
}

}  // namespace

bool gemv_q8_supported(const dev_matrix& w) {
  return (w.format == wformat::q4_1 || w.format == wformat::q8_0) && w.in % 32 == 0;
}

size_t gemv_q8_scratch_bytes(int64_t n, int64_t in) {
  return in <= staged_max_in ? 0 : static_cast<size_t>(n * in) + static_cast<size_t>(n * (in / 32)) * sizeof(float2);
}

void gemv_q8(const dev_matrix& w, const float* x, int64_t n, float* y, void* scratch, cudaStream_t stream) {
  if (n == 0 || w.out == 0) return;
  if (n > gemv_max_tokens) throw std::invalid_argument("gemv_q8: more than 8 token rows");
  const bool staged = w.in <= staged_max_in;
  int8_t* xq = nullptr;
  float2* ds = nullptr;
  if (!staged) {
    xq = static_cast<int8_t*>(scratch);
    ds = reinterpret_cast<float2*>(xq + n * w.in);
    const int64_t blocks = n * (w.in / 32);
    detail::launch_pdl(quantize_kernel, dim3(static_cast<unsigned>(std::min<int64_t>(blocks_for(blocks, 8), 1024))),
                       dim3(256), 0, stream, x, n, w.in, xq, ds);
  }
  if (w.format == wformat::q4_1) launch<wformat::q4_1>(w, x, n, y, xq, ds, staged, stream);
  else launch<wformat::q8_0>(w, x, n, y, xq, ds, staged, stream);
}

}  // namespace tandem::cuda
