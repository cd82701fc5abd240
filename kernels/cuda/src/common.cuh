#pragma once
// Helpers shared by the .cu files: launch geometry and warp/block reductions.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <utility>

#include "tandem_cuda/pdl.cuh"

namespace tandem::cuda::detail {

// Programmatic dependent launch: see tandem_cuda/pdl.cuh.
__device__ __forceinline__ void pdl_wait() { pdl::wait(); }
__device__ __forceinline__ void pdl_trigger() { pdl::trigger(); }
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  pdl::launch(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

inline unsigned blocks_for(int64_t items, int threads) {
  return static_cast<unsigned>((items + threads - 1) / threads);
}

__device__ __forceinline__ float warp_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
  return v;
}

// Where output row o of token t of an n-token linear goes: segment-major for grouped
// linears (see dev_matrix in tandem_cuda/kernels.hpp).
template <class Matrix>
__device__ __forceinline__ float* out_at(const Matrix& w, float* y, int64_t n, int t, int64_t o) {
  int i = 0;
  while (i + 1 < w.n_segs && o >= w.seg[i + 1]) ++i;
  const int64_t start = w.seg[i], rows = w.seg[i + 1] - start;
  return y + n * start + t * rows + (o - start);
}

// Sum over a block of up to 1024 threads; every thread gets the total. `red` holds 32 floats.
__device__ __forceinline__ float block_sum(float v, float* red) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  v = warp_sum(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  const int n_warps = (blockDim.x + 31) >> 5;
  v = lane < n_warps ? red[lane] : 0.0f;
  return warp_sum(v);
}

}  // namespace tandem::cuda::detail
