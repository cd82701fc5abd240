#pragma once
// x quantized to q8 blocks inside a thread block's shared memory, with a linear's prologue
// applied on the way (shared by the q8 GEMV, gemv_q8.cu, and the int8 tensor-core linear,
// gemv_q8_mma.cu): the arithmetic of backend.cpu's quantize_q8 and of pointwise.cu's
// rms_norm / silu_mul, so a staged x equals the quantize kernel's bit for bit.
#include <cstdint>

#include "common.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda::q8stage {

__device__ __forceinline__ int warp_sum_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// The same for block i held by an 8-lane group, four values per lane (v, lane li of the
// group holds values 4 li .. 4 li + 3): the maximum and the sum are exact whatever the
// order, so d, q and s are those of gemv_q8.cu's quantize_block (one warp per 32 values,
// the quantize kernel's). Every lane of the warp must call it
// (the reductions shuffle across the warp); only `write` lanes store.
__device__ __forceinline__ void quantize_quad(const float (&v)[4], int64_t i, int li, bool write, int8_t* xq,
                                              float2* ds) {
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
  for (int o = 4; o > 0; o >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d > 0.0f ? __frcp_rn(d) : 0.0f;
  int q[4], sum = 0;
#pragma unroll
  for (int c = 0; c < 4; ++c) {
    q[c] = max(-127, min(127, __float2int_rn(__fmul_rn(v[c], id))));
    sum += q[c];
  }
  for (int o = 4; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
  if (!write) return;
  const uint32_t packed = (static_cast<uint32_t>(q[0]) & 0xffu) | (static_cast<uint32_t>(q[1]) & 0xffu) << 8 |
                          (static_cast<uint32_t>(q[2]) & 0xffu) << 16 | (static_cast<uint32_t>(q[3]) & 0xffu) << 24;
  *reinterpret_cast<uint32_t*>(xq + i * 32 + li * 4) = packed;
  if (li == 0) ds[i] = make_float2(d, __fmul_rn(d, static_cast<float>(sum)));
}

// Shared memory of a staging block: x quantized [NT, in] and its block scales, then the
// rms prologue's per-(token, warp-of-32) sums [NT][32] (each warp keeps 1 / rms in registers).
inline size_t stage_smem_bytes(int nt, int64_t in) {
  return static_cast<size_t>(nt * in) + static_cast<size_t>(nt * (in / 32)) * sizeof(float2) +
         static_cast<size_t>(nt * 32) * sizeof(float);
}

// x [n, in] (n <= NT) through the prologue, quantized into shared memory by the block's NW
// warps.
// The prologue's arithmetic is pointwise.cu's, operation for operation, so the values
// quantized are those rms_norm / silu_mul would have written:
//  - rms_norm: rms_norm_kernel runs T = norm_threads(in) threads; thread j sums x[j]^2,
//    x[j + T]^2, ... with fused multiply-adds, block_sum tree-sums each warp's 32 sums
//    (warp_sum) and then the warp totals (warp_sum over lanes < T / 32); the value is
//    x * inv * w with inv = 1 / sqrtf(ss / in + eps). Warp k here computes "virtual warp"
//    sums of that kernel, in the same order.
//  - silu_mul: g / (1 + expf(-g)) * up.
template <int NT, int NW>
__device__ __forceinline__ void stage_x(const float* __restrict__ x, const dev_prologue& pro, int n, int in,
                                        int8_t* sq, float2* sds, float* sred, int warp, int lane) {
  const int nb = in / 32, total = n * nb;
  float inv[NT];  // 1 / rms per token, in every lane of every warp (registers, not shared)
#pragma unroll
  for (int t = 0; t < NT; ++t) inv[t] = 1.0f;
  if (pro.kind == dev_prologue::rms_norm) {
    const int T = in >= 1024 ? 1024 : (in + 31) / 32 * 32, vw = T / 32, items = n * vw;
    for (int i0 = warp; i0 < items; i0 += 4 * NW) {
      float ss[4];
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = i0 + u * NW;
        ss[u] = 0.0f;
        if (i < items) {
          const int t = i / vw;
          for (int j = (i - t * vw) * 32 + lane; j < in; j += T) {
            const float v = x[t * in + j];
            ss[u] = __fmaf_rn(v, v, ss[u]);
          }
        }
      }
#pragma unroll
      for (int u = 0; u < 4; ++u) {
        const int i = i0 + u * NW;
        if (i >= items) break;  // warp-uniform
        const float s = detail::warp_sum(ss[u]);
        if (lane == 0) sred[(i / vw) * 32 + i % vw] = s;
      }
    }
    __syncthreads();
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= n) break;  // uniform
      const float s = detail::warp_sum(lane < vw ? sred[t * 32 + lane] : 0.0f);  // every lane gets s
      inv[t] = 1.0f / sqrtf(s / static_cast<float>(in) + pro.eps);
    }
  }
  // Quantization: 8-lane groups, 4 groups a warp, `rounds` of them requested at once.
  constexpr int rounds = 8;
  const int li = lane & 7, grp = lane >> 3;
  for (int i0 = warp * 4; i0 < total; i0 += 4 * NW * rounds) {  // warp-uniform
    float v[rounds][4];
#pragma unroll
    for (int u = 0; u < rounds; ++u) {
      const int i = i0 + u * 4 * NW + grp;
#pragma unroll
      for (int c = 0; c < 4; ++c) v[u][c] = 0.0f;
      if (i < total) {
        const int e0 = i * 32 + li * 4;  // element t * in + j of x [NT, in]
        const int t = i / nb;
        float it = inv[0];  // inv[t] without a run-time register index
#pragma unroll
        for (int k = 1; k < NT; ++k) it = k == t ? inv[k] : it;
#pragma unroll
        for (int c = 0; c < 4; ++c) {
          const int e = e0 + c;
          const float g = x[e];
          if (pro.kind == dev_prologue::rms_norm) v[u][c] = g * it * pro.norm_weight[e - t * in];
          else if (pro.kind == dev_prologue::silu_mul) v[u][c] = g / (1.0f + expf(-g)) * pro.up[e];
          else v[u][c] = g;
        }
      }
    }
#pragma unroll
    for (int u = 0; u < rounds; ++u) {
      const int i = i0 + u * 4 * NW + grp;
      if (i0 + u * 4 * NW >= total) break;  // warp-uniform: no group of the warp has an item
      quantize_quad(v[u], i, li, i < total, sq, sds);
    }
  }
}

}  // namespace tandem::cuda::q8stage
