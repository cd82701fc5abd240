#pragma once
// A grid-wide barrier for cooperative (all blocks co-resident) kernels, reusable across
// launches and CUDA graph replays without host resets: `count` returns to 0 at every
// barrier and `gen` only ever increments (wrap-around is harmless: waiters compare for
// equality). Release/acquire at gpu scope make every global write made by any block
// before the barrier visible to every block after it.
//
// Layout: bar[0] = arrivals, bar[32] = generation (separate 128-byte lines, so spinning
// readers of the generation do not slow the arrivals' atomics).
#include <cuda_runtime.h>

namespace tandem::cuda::detail {

inline constexpr size_t grid_barrier_bytes = 64 * sizeof(unsigned);

__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}
__device__ __forceinline__ unsigned atom_add_acq_rel_gpu(unsigned* p, unsigned v) {
  unsigned old;
  asm volatile("atom.acq_rel.gpu.global.add.u32 %0, [%1], %2;" : "=r"(old) : "l"(p), "r"(v) : "memory");
  return old;
}
__device__ __forceinline__ void st_relaxed_gpu(unsigned* p, unsigned v) {
  asm volatile("st.relaxed.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

// Every thread of every block calls it. Thread 0 of each block arrives for its block once
// the block's threads have passed __syncthreads (their writes are ordered before the
// release by the CTA barrier plus the gpu-scope fence); the last arrival resets the count
// and publishes the next generation; the others spin on an acquire load of it.
__device__ __forceinline__ void grid_barrier(unsigned* bar) {
  __syncthreads();
  if (threadIdx.x == 0) {
    unsigned* count = bar;
    unsigned* gen = bar + 32;
    // The generation cannot advance before this block arrives, so this is the current one.
    const unsigned g = ld_acquire_gpu(gen);
    __threadfence();
    if (atom_add_acq_rel_gpu(count, 1) == gridDim.x - 1) {
      st_relaxed_gpu(count, 0);  // ordered before the release below
      st_release_gpu(gen, g + 1);
    } else {
      while (ld_acquire_gpu(gen) == g) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

}  // namespace tandem::cuda::detail
