#pragma once
// The PTX pieces of the MoE tensor-core GEMMs (moe_grouped_mma.cu, moe_grouped_wide.cu):
// cp.async with zero fill, ldmatrix, the m16n8k16 f16 mma with f32 accumulators, and the
// arguments both kernels take.
#include <cuda_fp16.h>

#include <cstdint>

#include "moe_grouped.cuh"

namespace tandem::cuda::moe_detail {

__device__ __forceinline__ void cp_async_zfill(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], const uint32_t b[2]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]));
}

struct gemm_args {
  const __half* A;  // gate+up: x16 [tokens][K]; down: h16 [P][K]
  const __half* W;  // [E][N][K]
  int64_t N, K;
  moe_ws ws;
};

// The wide kernel (moe_grouped_wide.cu): k stages of 64 through a STAGES-deep ring of
// wide_stage_bytes each; wide_prepare sets the kernels' shared-memory opt-in.
inline constexpr size_t wide_stage_bytes = static_cast<size_t>(staged_rows) * (64 + 8) * 2;
void wide_prepare(int stages);
void wide_launch(bool down, int stages, const gemm_args& a, dim3 grid, cudaStream_t stream);

}  // namespace tandem::cuda::moe_detail
