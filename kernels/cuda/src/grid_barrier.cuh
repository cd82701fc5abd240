#pragma once
// A grid-wide barrier for cooperative (all blocks co-resident) kernels, reusable across
// launches and CUDA graph replays without host resets: one 64-bit arrival counter that
// only ever grows (2^64 arrivals never wrap). Barrier k of the counter's life is passed
// once the counter reaches (k + 1) * gridDim.x; a block that raced ahead to barrier k + 1
// has already seen that, so its extra arrival never releases anyone early. Every launch
// that uses one counter must have the same grid size (the counter is then a multiple of it
// between launches). Release/acquire at gpu scope (plus the fences cooperative_groups
// uses) make every global write made by any block before the barrier visible to every
// block after it.
//
// Waiters spin on the counter itself, so the last arrival releases everyone with its one
// atomic (no separate reset-and-publish round trip).
#include <cuda_runtime.h>

namespace tandem::cuda::detail {

inline constexpr size_t grid_barrier_bytes = 128;  // the counter, alone on its line

__device__ __forceinline__ unsigned long long ld_acquire_gpu(const unsigned long long* p) {
  unsigned long long v;
  asm volatile("ld.acquire.gpu.global.u64 %0, [%1];" : "=l"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned long long atom_add_acq_rel_gpu(unsigned long long* p, unsigned long long v) {
  unsigned long long old;
  asm volatile("atom.acq_rel.gpu.global.add.u64 %0, [%1], %2;" : "=l"(old) : "l"(p), "l"(v) : "memory");
  return old;
}

// Every thread of every block calls it. Thread 0 of each block arrives for its block once
// the block's threads have passed __syncthreads (their writes are ordered before the
// release by the CTA barrier plus the gpu-scope fence), then spins with acquire loads.
__device__ __forceinline__ void grid_barrier(unsigned long long* counter) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned long long n = gridDim.x;
    __threadfence();
    const unsigned long long old = atom_add_acq_rel_gpu(counter, 1);
    const unsigned long long target = (old / n + 1) * n;
    while (ld_acquire_gpu(counter) < target) {
    }
    __threadfence();
  }
  __syncthreads();
}

}  // namespace tandem::cuda::detail
