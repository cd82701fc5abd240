#pragma once
// Device pieces of the 8-bit-activation GEMV for kernels that run it inside a larger
// kernel (decode_stack.cu): x quantized per 32-block as backend.cpu's quantize_q8, the
// staging prologue's rms_norm, and the Q4_1 / Q8_0 block dot with dp4a. The arithmetic is
// gemv_q8.cu's operation for operation (same lane-to-block mapping, same accumulation
// expression), so a row computed here equals gemv_q8's row bit for bit; the weight format
// is a run-time value here because one fused kernel walks matrices of either format.
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda::q8 {

__device__ __forceinline__ int warp_sum_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Block i (32 values, one per lane; v is this lane's) to xq[32 i + lane] and ds[i] =
// (d, d * sum q): d = amax / 127, q = rint(x / d), as quantize_q8.
__device__ __forceinline__ void quantize_block(float v, int i, int lane, int8_t* xq, float2* ds) {
  const float amax = detail::warp_max(fabsf(v));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d > 0.0f ? __frcp_rn(d) : 0.0f;
  const int q = max(-127, min(127, __float2int_rn(__fmul_rn(v, id))));
  xq[i * 32 + lane] = static_cast<int8_t>(q);
  const int sum = warp_sum_int(q);
  if (lane == 0) ds[i] = make_float2(d, __fmul_rn(d, static_cast<float>(sum)));
}

// x [in] (global or shared) quantized into sq / sds by the block's NW warps, through
// rms_norm(x, norm_w, eps) first when norm_w is set. The norm reproduces rms_norm_kernel
// (pointwise.cu) with T = norm_threads(in) threads: "virtual warp" k sums x[32 k + lane],
// x[32 k + lane + T], ... with fused multiply-adds, then the virtual warps' sums are
// warp-summed in order (gemv_q8.cu's stage_x, for one token). `sred` holds 32 floats.
// Ends with __syncthreads(): sq / sds are ready for every warp.
template <int NW>
__device__ void stage_q8(const float* x, const float* norm_w, float eps, int in, int8_t* sq, float2* sds, float* sred,
                         int warp, int lane) {
  float inv = 1.0f;
  if (norm_w != nullptr) {
    const int T = in >= 1024 ? 1024 : (in + 31) / 32 * 32, vw = T / 32;
    for (int i = warp; i < vw; i += NW) {
      float ss = 0.0f;
      for (int j = i * 32 + lane; j < in; j += T) {
        const float v = x[j];
        ss = __fmaf_rn(v, v, ss);
      }
      const float s = detail::warp_sum(ss);
      if (lane == 0) sred[i] = s;
    }
    __syncthreads();
    const float s = detail::warp_sum(lane < vw ? sred[lane] : 0.0f);
    inv = 1.0f / sqrtf(s / static_cast<float>(in) + eps);
  }
  const int nb = in / 32;
  for (int i0 = warp; i0 < nb; i0 += 4 * NW) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * NW, e = i * 32 + lane;
      v[u] = 0.0f;
      if (i < nb) v[u] = norm_w != nullptr ? x[e] * inv * norm_w[e] : x[e];
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int i = i0 + u * NW;
      if (i >= nb) break;  // warp-uniform
      quantize_block(v[u], i, lane, sq, sds);
    }
  }
  __syncthreads();
}

// One weight block as loaded (q4_1: q0 holds 32 nibbles; q8_0: q0, q1 hold 32 int8).
struct wblock {
  uint4 q0, q1;
  float d, m;
};

__device__ __forceinline__ wblock load_wblock(const dev_matrix& w, int64_t row, int b, int nb) {
  wblock r;
  const int64_t i = row * nb + b;
  if (w.format == wformat::q4_1) {
    r.q0 = __ldcs(static_cast<const uint4*>(w.qs) + i);  // read once per step: keep it out of L1
    r.q1 = make_uint4(0, 0, 0, 0);
    const __half2 dm = __ldcs(static_cast<const __half2*>(w.scales) + i);
    r.d = __low2float(dm), r.m = __high2float(dm);
  } else {
    const uint4* q = static_cast<const uint4*>(w.qs) + i * 2;
    r.q0 = __ldcs(q), r.q1 = __ldcs(q + 1);
    r.d = __half2float(__ldcs(static_cast<const __half*>(w.scales) + i)), r.m = 0.0f;
  }
  return r;
}

__device__ __forceinline__ int dot_block(bool q41, const wblock& wb, const int4& x0, const int4& x1) {
  int s = 0;
  if (q41) {
    // Byte j holds q[j] (low nibble) and q[j + 16] (high nibble).
    const uint32_t w[4] = {wb.q0.x, wb.q0.y, wb.q0.z, wb.q0.w};
    const int xl[4] = {x0.x, x0.y, x0.z, x0.w}, xh[4] = {x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s = __dp4a(static_cast<int>(w[k] & 0x0f0f0f0fu), xl[k], s);
      s = __dp4a(static_cast<int>((w[k] >> 4) & 0x0f0f0f0fu), xh[k], s);
    }
  } else {
    const int w[8] = {static_cast<int>(wb.q0.x), static_cast<int>(wb.q0.y), static_cast<int>(wb.q0.z),
                      static_cast<int>(wb.q0.w), static_cast<int>(wb.q1.x), static_cast<int>(wb.q1.y),
                      static_cast<int>(wb.q1.z), static_cast<int>(wb.q1.w)};
    const int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
#pragma unroll
    for (int k = 0; k < 8; ++k) s = __dp4a(w[k], xs[k], s);
  }
  return s;
}

// acc += weight block b (already loaded) . activation block b, as gemv_q8's dot_step.
__device__ __forceinline__ void dot_acc(bool q41, const wblock& wb, int b, const int8_t* xq, const float2* ds,
                                        float& acc) {
  const int4* xp = reinterpret_cast<const int4*>(xq + b * 32);
  const float dot = static_cast<float>(dot_block(q41, wb, xp[0], xp[1]));
  const float2 dx = ds[b];
  acc += wb.d * dx.x * dot + wb.m * dx.y;
}

// R rows of w dotted with the staged activations by one warp: lane l takes blocks l,
// l + 32, ... of each row (gemv_q8's order); `first` holds block `lane` of each row,
// loaded earlier (before a grid barrier) when lane < nb. Returns the row sums in every lane.
template <int R>
__device__ __forceinline__ void dot_rows(const dev_matrix& w, const int64_t (&rows)[R], const wblock (&first)[R],
                                         const int8_t* xq, const float2* ds, int lane, float (&out)[R]) {
  const int nb = static_cast<int>(w.in / 32);
  const bool q41 = w.format == wformat::q4_1;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;
  if (lane < nb) {
#pragma unroll
    for (int r = 0; r < R; ++r) dot_acc(q41, first[r], lane, xq, ds, acc[r]);
  }
  for (int b = lane + 32; b < nb; b += 32) {
    wblock cur[R];
#pragma unroll
    for (int r = 0; r < R; ++r) cur[r] = load_wblock(w, rows[r], b, nb);
#pragma unroll
    for (int r = 0; r < R; ++r) dot_acc(q41, cur[r], b, xq, ds, acc[r]);
  }
#pragma unroll
  for (int r = 0; r < R; ++r) out[r] = detail::warp_sum(acc[r]);
}

template <int R>
__device__ __forceinline__ void load_first(const dev_matrix& w, const int64_t (&rows)[R], int lane, wblock (&first)[R]) {
  const int nb = static_cast<int>(w.in / 32);
  if (lane < nb) {
#pragma unroll
    for (int r = 0; r < R; ++r) first[r] = load_wblock(w, rows[r], lane, nb);
  }
}

}  // namespace tandem::cuda::q8
