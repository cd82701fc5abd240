// moe_forward (tandem_cuda/moe.hpp): plan, expert kernels, combine; the GEMV path for
// decode, the weight conversion at load and the per-expert loop's pieces. The tensor-core
// GEMMs are moe_grouped_mma.cu, the plan moe_route.cu.
//
// Launches of one forward (all on `stream`, no host reads, grids fixed by the token count):
//   1. plan (1 block): pairs grouped by expert, active experts, row tiles (moe_tiles.hpp);
//   gemv: 2. gate+up: grid (ffn / 16, min(E, P)): block y = the y-th active expert (blocks past
//            the active count exit), warp = 2 columns of gate and of up (4 weight rows) over the
//            expert's token rows, 4 at a time: each lane streams 16-byte chunks of the 4 rows
//            (ld.global.nc, no L1 allocation: weights are read once) and FMAs them against the
//            rows' f32 x (L1-cached, shared by the block's warps); warp sums; silu(g) * u in
//            f32 into h [slot][ffn] f32;
//         3. down: grid (hidden / 32, min(E, P)), warp = 4 rows of w2 over h: y [pair][hidden];
//   mma:  2. x -> f16; 3. gate+up GEMM (epilogue silu(g) * u, f16 h); 4. down GEMM (f32 y);
//   last: combine: out[t] = sum_j weights[t, j] * y[t * top_k + j], j ascending, pairs with an
//         id outside [0, E) skipped; every element of out written.
#include <algorithm>

#include "common.cuh"
#include "moe_grouped.cuh"
#include "tandem_cuda/moe.hpp"

namespace tandem::cuda {
namespace {

using moe_detail::moe_ws;

constexpr int gv_rows = 4;  // token rows per weight pass of the GEMV kernels

// 16 bytes of weights, not allocated in L1 (read once; x keeps L1).
__device__ __forceinline__ uint4 ld_stream(const void* p) {
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
}

__device__ __forceinline__ float silu_mul(float g, float u) { return g / (1.0f + expf(-g)) * u; }

// acc[q][r] = dot(w[q][0..K), x[r][0..K)) for 4 f16 weight rows and R f32 rows, summed over the
// warp (every lane gets the sums). K % 8 == 0; x rows 16-byte aligned.
template <int R>
__device__ __forceinline__ void gemv4(const __half* const w[4], const float* const x[R], int64_t K, int lane,
                                      float acc[4][R]) {
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[q][r] = 0.0f;
#pragma unroll 2
  for (int64_t k = int64_t{lane} * 8; k < K; k += 256) {
    uint4 wv[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) wv[q] = ld_stream(w[q] + k);
    float wf[4][8];  // converted once, used by every row
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const __half2* hp = reinterpret_cast<const __half2*>(&wv[q]);
#pragma unroll
      for (int p = 0; p < 4; ++p) {
        const float2 f = __half22float2(hp[p]);
        wf[q][2 * p] = f.x, wf[q][2 * p + 1] = f.y;
      }
    }
#pragma unroll
    for (int r = 0; r < R; ++r) {
      const float4 a = __ldg(reinterpret_cast<const float4*>(x[r] + k));
      const float4 b = __ldg(reinterpret_cast<const float4*>(x[r] + k + 4));
      const float xv[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
#pragma unroll
      for (int q = 0; q < 4; ++q)
#pragma unroll
        for (int i = 0; i < 8; ++i) acc[q][r] = fmaf(wf[q][i], xv[i], acc[q][r]);
    }
  }
#pragma unroll
  for (int q = 0; q < 4; ++q)
#pragma unroll
    for (int r = 0; r < R; ++r) acc[q][r] = detail::warp_sum(acc[q][r]);
}

// Rows s .. s + R - 1 of one expert, ffn columns j, j + 1 (w: gate j, gate j+1, up j, up j+1).
template <int R>
__device__ __forceinline__ void gate_up_pass(const __half* const w[4], const float* x, int64_t ldx, const moe_ws& ws,
                                             int s, int64_t j, int64_t F, int64_t K, int lane) {
  const float* xr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) xr[r] = x + int64_t{ws.slot_tok[s + r]} * ldx;
  float acc[4][R];
  gemv4<R>(w, xr, K, lane, acc);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float* h = static_cast<float*>(ws.h) + int64_t{s + r} * F + j;
      *reinterpret_cast<float2*>(h) = make_float2(silu_mul(acc[0][r], acc[2][r]), silu_mul(acc[1][r], acc[3][r]));
    }
  }
}

// Rows s .. s + R - 1 of one expert, output columns o .. o + 3.
template <int R>
__device__ __forceinline__ void down_pass(const __half* const w[4], const moe_ws& ws, int s, int64_t o, int64_t H,
                                          int64_t F, int lane) {
  const float* hr[R];
#pragma unroll
  for (int r = 0; r < R; ++r) hr[r] = static_cast<const float*>(ws.h) + int64_t{s + r} * F;
  float acc[4][R];
  gemv4<R>(w, hr, F, lane, acc);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r) {
      float* y = ws.y + int64_t{ws.slot_pair[s + r]} * H + o;
      *reinterpret_cast<float4*>(y) = make_float4(acc[0][r], acc[1][r], acc[2][r], acc[3][r]);
    }
  }
}

// Calls f.template operator()<R>() for R = r (1 <= r <= RMAX; RMAX in {1, 2, 4}).
template <int RMAX, class F>
__device__ __forceinline__ void with_rows(int r, F&& f) {
  static_assert(RMAX == 1 || RMAX == 2 || RMAX == 4);
  if constexpr (RMAX == 1) {
    f.template operator()<1>();
  } else if constexpr (RMAX == 2) {
    if (r == 1) f.template operator()<1>();
    else f.template operator()<2>();
  } else {
    switch (r) {
      case 1: f.template operator()<1>(); break;
      case 2: f.template operator()<2>(); break;
      case 3: f.template operator()<3>(); break;
      default: f.template operator()<4>(); break;
    }
  }
}

// Passes of up to RMAX token rows over the weights (an expert with more rows makes more
// passes). One token has 1 row per expert (2 when it lists one twice); 8 tokens x top-8 over
// 256 experts give ~0.6 experts with 3 or more. RMAX = 4 costs no more registers than 1
// (~128: the unrolled loads dominate), RMAX = 8 spills.
template <int RMAX>
__global__ void __launch_bounds__(256, 2) gemv_gate_up_kernel(const float* __restrict__ x, int64_t ldx, dev_experts w,
                                                              moe_ws ws) {
  if (static_cast<int>(blockIdx.y) >= ws.hdr[0]) return;
  const int e = ws.active[blockIdx.y];
  const int cnt = ws.counts[e], s0 = ws.offsets[e];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t F = w.ffn, K = w.hidden;
  const int64_t j = (int64_t{blockIdx.x} * 8 + warp) * 2;
  if (j >= F) return;
  const __half* g0 = w.w13 + (int64_t{e} * 2 * F + moe_w13_row(j, false)) * K;
  const __half* const wr[4] = {g0, g0 + K, g0 + 8 * K, g0 + 9 * K};
  for (int r0 = 0; r0 < cnt; r0 += RMAX) {
    with_rows<RMAX>(min(RMAX, cnt - r0), [&]<int R>() { gate_up_pass<R>(wr, x, ldx, ws, s0 + r0, j, F, K, lane); });
  }
}

template <int RMAX>
__global__ void __launch_bounds__(256, 2) gemv_down_kernel(dev_experts w, moe_ws ws) {
  if (static_cast<int>(blockIdx.y) >= ws.hdr[0]) return;
  const int e = ws.active[blockIdx.y];
  const int cnt = ws.counts[e], s0 = ws.offsets[e];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t H = w.hidden, F = w.ffn;
  const int64_t o = (int64_t{blockIdx.x} * 8 + warp) * 4;
  if (o >= H) return;
  const __half* d0 = w.w2 + (int64_t{e} * H + o) * F;
  const __half* const wr[4] = {d0, d0 + F, d0 + 2 * F, d0 + 3 * F};
  for (int r0 = 0; r0 < cnt; r0 += RMAX) {
    with_rows<RMAX>(min(RMAX, cnt - r0), [&]<int R>() { down_pass<R>(wr, ws, s0 + r0, o, H, F, lane); });
  }
}

// x16 [n][H] = f16(x), 8 elements per thread.
__global__ void x_to_f16_kernel(const float* __restrict__ x, int64_t ldx, int64_t n, int64_t H, __half* __restrict__ x16) {
  const int64_t H8 = H / 8;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n * H8) return;
  const int64_t t = i / H8, c = (i % H8) * 8;
  const float4 a = *reinterpret_cast<const float4*>(x + t * ldx + c);
  const float4 b = *reinterpret_cast<const float4*>(x + t * ldx + c + 4);
  __half2 h[4] = {__floats2half2_rn(a.x, a.y), __floats2half2_rn(a.z, a.w), __floats2half2_rn(b.x, b.y),
                  __floats2half2_rn(b.z, b.w)};
  *reinterpret_cast<uint4*>(x16 + t * H + c) = *reinterpret_cast<const uint4*>(h);
}

__global__ void combine_kernel(const float* __restrict__ weights, int64_t n, int k, int64_t H, moe_ws ws,
                               float* __restrict__ out, int64_t ldo) {
  const int64_t H4 = H / 4;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= n * H4) return;
  const int64_t t = i / H4, c = (i % H4) * 4;
  float4 acc = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  for (int j = 0; j < k; ++j) {
    const int64_t p = t * k + j;
    if (ws.pair_slot[p] < 0) continue;
    const float wv = weights[p];
    const float4 v = *reinterpret_cast<const float4*>(ws.y + p * H + c);
    acc.x = fmaf(wv, v.x, acc.x);
    acc.y = fmaf(wv, v.y, acc.y);
    acc.z = fmaf(wv, v.z, acc.z);
    acc.w = fmaf(wv, v.w, acc.w);
  }
  *reinterpret_cast<float4*>(out + t * ldo + c) = acc;
}

__device__ __forceinline__ float bf16_bits_to_float(uint16_t b) { return __uint_as_float(uint32_t{b} << 16); }

__global__ void convert_kernel(const void* __restrict__ src, int type, int64_t rows, int64_t cols,
                               __half* __restrict__ dst, int mode, unsigned* overflow) {
  const int64_t c8 = cols / 8;
  const int64_t stride = int64_t{gridDim.x} * blockDim.x;
  bool over = false;
  for (int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x; i < rows * c8; i += stride) {
    const int64_t r = i / c8, c = (i % c8) * 8;
    float v[8];
    if (type == static_cast<int>(moe_src::f32)) {
      const float* s = static_cast<const float*>(src) + r * cols + c;
      const float4 a = *reinterpret_cast<const float4*>(s), b = *reinterpret_cast<const float4*>(s + 4);
      v[0] = a.x, v[1] = a.y, v[2] = a.z, v[3] = a.w, v[4] = b.x, v[5] = b.y, v[6] = b.z, v[7] = b.w;
    } else {
      const uint4 raw = *reinterpret_cast<const uint4*>(static_cast<const uint16_t*>(src) + r * cols + c);
      const uint16_t* h = reinterpret_cast<const uint16_t*>(&raw);
#pragma unroll
      for (int q = 0; q < 8; ++q)
        v[q] = type == static_cast<int>(moe_src::bf16) ? bf16_bits_to_float(h[q]) : __half2float(__ushort_as_half(h[q]));
    }
    __half2 o[4];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      o[q] = __floats2half2_rn(v[2 * q], v[2 * q + 1]);
      const float2 back = __half22float2(o[q]);
      over = over || (isfinite(v[2 * q]) && isinf(back.x)) || (isfinite(v[2 * q + 1]) && isinf(back.y));
    }
    const int64_t dr = mode == static_cast<int>(moe_rows::plain) ? r : moe_w13_row(r, mode == static_cast<int>(moe_rows::up));
    *reinterpret_cast<uint4*>(dst + dr * cols + c) = *reinterpret_cast<const uint4*>(o);
  }
  if (over) atomicOr(overflow, 1u);
}

__global__ void gather_f16_kernel(const float* __restrict__ x, int64_t ldx, const int32_t* __restrict__ rows,
                                  int64_t d, __half* __restrict__ out) {
  const int64_t i = blockIdx.y;
  const int64_t c = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) * 8;
  if (c >= d) return;
  const float* s = x + int64_t{rows[i]} * ldx + c;
  const float4 a = *reinterpret_cast<const float4*>(s), b = *reinterpret_cast<const float4*>(s + 4);
  __half2 h[4] = {__floats2half2_rn(a.x, a.y), __floats2half2_rn(a.z, a.w), __floats2half2_rn(b.x, b.y),
                  __floats2half2_rn(b.z, b.w)};
  *reinterpret_cast<uint4*>(out + i * d + c) = *reinterpret_cast<const uint4*>(h);
}

__global__ void silu_mul_w13_kernel(const float* __restrict__ g13, int64_t m, int64_t F, __half* __restrict__ h) {
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i >= m * F) return;
  const int64_t r = i / F, j = i % F;
  const float* g = g13 + r * 2 * F;
  h[i] = __float2half_rn(silu_mul(g[moe_w13_row(j, false)], g[moe_w13_row(j, true)]));
}

__global__ void scatter_add_kernel(const float* __restrict__ d, const int32_t* __restrict__ rows,
                                   const float* __restrict__ w, int64_t H, float* out, int64_t ldo) {
  const int64_t i = blockIdx.y;
  const int64_t c = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (c >= H) return;
  atomicAdd(out + int64_t{rows[i]} * ldo + c, w[i] * d[i * H + c]);
}

unsigned blocks(int64_t items, int threads) { return static_cast<unsigned>((items + threads - 1) / threads); }

}  // namespace

size_t moe_workspace_bytes(const dev_experts& w, int64_t tokens, int top_k, moe_kernel k) {
  return moe_detail::moe_ws_layout(w, tokens, top_k, k).total;
}

void moe_forward(const dev_experts& w, const float* x, int64_t ldx, int64_t tokens, const int32_t* ids,
                 const float* weights, int top_k, float* out, int64_t ldo, void* workspace, moe_kernel k,
                 cudaStream_t stream) {
  if (tokens <= 0) return;
  const int64_t P = tokens * top_k;
  const moe_detail::moe_ws_layout L(w, tokens, top_k, k);
  const moe_ws ws = L.carve(workspace);
  // The GEMV kernels walk each expert's rows and never read the tiles.
  const int cap = k == moe_kernel::mma ? moe_detail::moe_mma_row_cap(w.n_experts, P) : moe_detail::tile_rows;
  moe_detail::moe_plan(ids, P, top_k, w.n_experts, cap, ws, stream);
  const unsigned experts_y = static_cast<unsigned>(std::min<int64_t>(w.n_experts, P));
  if (k == moe_kernel::gemv) {
    const dim3 gu(blocks(w.ffn, 16), experts_y), dn(blocks(w.hidden, 32), experts_y);
    gemv_gate_up_kernel<gv_rows><<<gu, 256, 0, stream>>>(x, ldx, w, ws);
    gemv_down_kernel<gv_rows><<<dn, 256, 0, stream>>>(w, ws);
  } else {
    x_to_f16_kernel<<<blocks(tokens * (w.hidden / 8), 256), 256, 0, stream>>>(x, ldx, tokens, w.hidden, ws.x16);
    moe_detail::moe_mma_gate_up(w, P, ws, stream);
    moe_detail::moe_mma_down(w, P, ws, stream);
  }
  combine_kernel<<<blocks(tokens * (w.hidden / 4), 256), 256, 0, stream>>>(weights, tokens, top_k, w.hidden, ws, out,
                                                                           ldo);
}

void moe_convert_rows(const void* src, moe_src type, int64_t rows, int64_t cols, __half* dst, moe_rows mode,
                      unsigned* overflow, cudaStream_t stream) {
  const int64_t items = rows * (cols / 8);
  if (items == 0) return;
  const unsigned grid = static_cast<unsigned>(std::min<int64_t>(blocks(items, 256), 4096));
  convert_kernel<<<grid, 256, 0, stream>>>(src, static_cast<int>(type), rows, cols, dst, static_cast<int>(mode),
                                           overflow);
}

void moe_gather_f16(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t d, __half* out,
                    cudaStream_t stream) {
  if (m == 0 || d == 0) return;
  gather_f16_kernel<<<dim3(blocks(d / 8, 128), static_cast<unsigned>(m)), 128, 0, stream>>>(x, ldx, rows, d, out);
}

void moe_silu_mul_w13(const float* g13, int64_t m, int64_t ffn, __half* h, cudaStream_t stream) {
  if (m * ffn == 0) return;
  silu_mul_w13_kernel<<<blocks(m * ffn, 256), 256, 0, stream>>>(g13, m, ffn, h);
}

void moe_scatter_add(const float* d, const int32_t* rows, const float* w, int64_t m, int64_t hidden, float* out,
                     int64_t ldo, cudaStream_t stream) {
  if (m == 0 || hidden == 0) return;
  scatter_add_kernel<<<dim3(blocks(hidden, 256), static_cast<unsigned>(m)), 256, 0, stream>>>(d, rows, w, hidden, out,
                                                                                           ldo);
}

}  // namespace tandem::cuda
