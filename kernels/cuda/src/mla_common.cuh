#pragma once
// Device helpers shared by the MLA and DSA kernels (mla_prepare.cu, mla_attend.cu,
// dsa_prepare.cu, dsa_select.cu): the RoPE angles of the reference, row lookup in a
// flattened batch, paged slots of key-only caches, a block-wide prefix sum.
#include <cuda_runtime.h>

#include <cstdint>

#include "common.cuh"
#include "tandem_cuda/mla.hpp"

namespace tandem::cuda::detail {

// (cos, sin) of pair i of `dims` rotated dims at `pos`, in double as ref::rope_angle.
__device__ __forceinline__ float2 rope_angle(double theta, int dims, int pos, int i) {
  const double a = static_cast<double>(pos) * pow(theta, -2.0 * i / dims);
  return make_float2(static_cast<float>(cos(a)), static_cast<float>(sin(a)));
}

// Rotates adjacent pairs (2i, 2i+1) of src into dst with cs = (cos, sin): the rope()
// convention (neox = false). src and dst may be the same.
__device__ __forceinline__ void rotate_pair(const float* src, float* dst, int i, float2 cs) {
  const float x0 = src[2 * i], x1 = src[2 * i + 1];
  dst[2 * i] = x0 * cs.x - x1 * cs.y;
  dst[2 * i + 1] = x0 * cs.y + x1 * cs.x;
}

// The sequence of flattened row r (query_start[s] <= r < query_start[s + 1]) and the last
// key position it sees.
__device__ __forceinline__ row_info find_row(const row_batch& b, int r) {
  int lo = 0, hi = b.n_seqs - 1;  // the last s with query_start[s] <= r
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (b.query_start[mid] <= r) lo = mid;
    else hi = mid - 1;
  }
  const int q0 = b.query_start[lo], q1 = b.query_start[lo + 1];
  return {lo, b.seq_lens[lo] - (q1 - q0) + (r - q0)};
}

// Pool slot of position t of sequence s. A position past the page table's width and pages
// outside the pool are clamped (memory-safe for a corrupt batch; the engine never passes
// one, and the host cannot check device data without a read back).
__device__ __forceinline__ int64_t slot_of(const row_batch& b, const key_cache& kc, int s, int t) {
  const int logical = min(t / kc.page_size, b.max_pages - 1);
  int32_t page = b.page_table[int64_t{s} * b.max_pages + logical];
  page = min(max(page, 0), static_cast<int32_t>(kc.n_pages - 1));
  return int64_t{page} * kc.page_size + t % kc.page_size;
}

// Exclusive prefix sum of v over the block (blockDim.x a multiple of 32, at most 1024);
// *total = the block's sum. warp_sums: 32 ints of shared memory. Every thread must call it;
// it ends with a barrier, so it may be called again at once.
__device__ __forceinline__ int block_exclusive_scan(int v, int* warp_sums, int* total) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  int x = v;
  for (int o = 1; o < 32; o <<= 1) {
    const int y = __shfl_up_sync(0xffffffffu, x, o);
    if (lane >= o) x += y;
  }
  if (lane == 31) warp_sums[warp] = x;
  __syncthreads();
  if (warp == 0) {
    int w = lane < n_warps ? warp_sums[lane] : 0;
    for (int o = 1; o < 32; o <<= 1) {
      const int y = __shfl_up_sync(0xffffffffu, w, o);
      if (lane >= o) w += y;
    }
    warp_sums[lane] = w;  // inclusive
  }
  __syncthreads();
  const int before = (warp > 0 ? warp_sums[warp - 1] : 0) + x - v;
  *total = warp_sums[n_warps - 1];
  __syncthreads();  // everyone has read warp_sums before a next call writes it
  return before;
}

}  // namespace tandem::cuda::detail
