#pragma once
// What the fused EXL3 GEMV kernels share (gemv.cu: fp16 activations; gemv_q8.cu: int8
// activations): the warp-private cp.async ring's primitives, the cheaper state extraction,
// and the stream-K launch over units of column-adjacent tiles (gemv.cu's header explains
// the design).
#include <algorithm>

#include "decode.cuh"
#include "tandem_exl3_cuda/exl3_cuda.hpp"

namespace tandem::exl3::cuda::gemv_detail {

constexpr int warps_per_block = 8;
constexpr int a_stride = 12;   // 32-bit words per activation row in shared memory (conflict-free)
constexpr int min_units_per_warp = 4;

__device__ __forceinline__ void cp_async_cg(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ void cp_async_ca(uint32_t dst, const void* src) {
  asm volatile("cp.async.ca.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}

// The 8 states of lane_states<K> (the same values) with fewer integer ops for K = 2 and 4
// (variants 4, 5). A 16-bit field costs 1 op (SHF, LOP3 or PRMT against zero) when it
// starts at bit 0, 8 or 16 (from the MSB) of some register and 2 (shift + mask) otherwise,
// so each extra register made by one shift pays for itself once it puts two states at such
// offsets.
//  - K = 4 (offsets 20 + 4j in w0:w1): w1 gives 32, 40, 48; funnel(w0:w1 << 20) gives 20,
//    28, 36; 24 (funnel + shift) and 44 (shift + mask) cost 2: 11 ops instead of 13.
//  - K = 2 (offsets 2j of the lane-normalized v0, all inside its first 30 bits): v0, v0 << 2,
//    << 4, << 6 each give the states at their offsets 0 and 8: 4 + 8 = 12 ops instead of 15.
template <int K>
__device__ __forceinline__ void lane_states_x(const uint32_t* w, int shift, uint32_t s[8]) {
  if constexpr (K == 4) {
    const uint32_t b = __funnelshift_l(w[1], w[0], 20);  // window bits 20..51
    s[0] = b >> 16;
    s[2] = __byte_perm(b, 0u, 0x4421);
    s[4] = b & 0xffffu;
    s[1] = __funnelshift_l(w[1], w[0], 24) >> 16;
    s[3] = w[1] >> 16;
    s[5] = __byte_perm(w[1], 0u, 0x4421);
    s[6] = (w[1] >> 4) & 0xffffu;
    s[7] = w[1] & 0xffffu;
  } else if constexpr (K == 2) {
    const uint32_t v = __funnelshift_l(w[1], w[0], shift);
#pragma unroll
    for (int j = 0; j < 4; ++j) {
      const uint32_t u = v << (2 * j);
      s[j] = u >> 16;
      s[j + 4] = __byte_perm(u, 0u, 0x4421);
    }
  } else {
    detail::lane_states<K>(w, shift, s);
  }
}

struct occupancy {
  int blocks_per_sm = 0, sms = 0;
};

// Blocks per SM of `kernel` with `smem` dynamic bytes, once per (instantiation, device).
template <auto Kernel>
occupancy occupancy_of(int smem) {
  static occupancy cache[16];
  int dev = 0;
  cudaGetDevice(&dev);
  occupancy& o = cache[dev & 15];
  if (o.sms == 0) {
    cudaFuncSetAttribute(Kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o.blocks_per_sm, Kernel, warps_per_block * 32, smem);
    cudaDeviceGetAttribute(&o.sms, cudaDevAttrMultiProcessorCount, dev);
    o.blocks_per_sm = std::max(o.blocks_per_sm, 1);
  }
  return o;
}

// One launch of `Kernel` over the weight's units of `g` tiles: a grid that fills the GPU
// once (at least min_units_per_warp units per warp).
template <auto Kernel, class X>
void launch_units(const dev_exl3& w, int g, int smem, const X* xh, int rows, float* acc, cudaStream_t stream) {
  const occupancy o = occupancy_of<Kernel>(smem);
  const int64_t units = (w.n / (g * 16)) * (w.k / 16);
  const int64_t want = std::max<int64_t>(1, (units + min_units_per_warp - 1) / min_units_per_warp);
  const int64_t warps = std::min<int64_t>(int64_t{o.blocks_per_sm} * o.sms * warps_per_block, want);
  const int blocks = static_cast<int>((warps + warps_per_block - 1) / warps_per_block);
  detail::launch_pdl(Kernel, dim3(blocks), dim3(warps_per_block * 32), smem, stream,
                     reinterpret_cast<const uint8_t*>(w.trellis), xh, rows, w.k, w.n, acc, units,
                     blocks * warps_per_block);
}

}  // namespace tandem::exl3::cuda::gemv_detail
