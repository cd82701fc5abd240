#pragma once
// A block-wide exclusive prefix sum for 1024-thread blocks, shared by the MoE routing plans
// (kernels/cuda/src/moe_route.cu and kernels/exl3/cuda/src/moe.cu).
#include <cuda_runtime.h>

namespace tandem::cuda {

// Exclusive prefix sum of v over a 1024-thread block; *total = the sum of all v. s_warp: 32
// ints of shared memory. Every thread of the block must call it (it synchronizes).
__device__ __forceinline__ int block_exclusive_scan(int v, int* s_warp, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  int incl = v;
#pragma unroll
  for (int d = 1; d < 32; d <<= 1) {
    const int o = __shfl_up_sync(0xffffffffu, incl, d);
    if (lane >= d) incl += o;
  }
  if (lane == 31) s_warp[warp] = incl;
  __syncthreads();
  if (warp == 0) {
    int w = s_warp[lane];
#pragma unroll
    for (int d = 1; d < 32; d <<= 1) {
      const int o = __shfl_up_sync(0xffffffffu, w, d);
      if (lane >= d) w += o;
    }
    s_warp[lane] = w;
  }
  __syncthreads();
  const int r = (warp ? s_warp[warp - 1] : 0) + incl - v;
  *total = s_warp[31];
  __syncthreads();  // s_warp is reused by the next scan
  return r;
}

}  // namespace tandem::cuda
