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

// The 8 states of lane_states<K> (the same values) with fewer integer ops for K = 2 and 4.
// A 16-bit field costs 1 op (SHF, LOP3 or PRMT against zero) when it
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

// This warp's share of the stream-K split (units [u0, u0 + count), count <= 0: none) and its
// ring of WarpBytes in the block's dynamic shared memory.
struct warp_span {
  int lane, count;
  int64_t u0;
  uint32_t ring;
};
template <int WarpBytes>
__device__ __forceinline__ warp_span warp_span_of(uint8_t* smem, int64_t units, int total_warps) {
  const int warp = threadIdx.x >> 5;
  const int64_t gw = int64_t{blockIdx.x} * warps_per_block + warp;
  const int64_t u0 = units * gw / total_warps, u1 = units * (gw + 1) / total_warps;
  return {static_cast<int>(threadIdx.x & 31), static_cast<int>(u1 - u0), u0,
          static_cast<uint32_t>(__cvta_generic_to_shared(smem + warp * WarpBytes))};
}

// The units one warp computes, in order (gemv.cu's design): where the next unit's trellis
// and activations come from, advanced one 16-row band at a time and wrapping to the top of
// the next column group, and the ring stage they go to. L is the kernel's layout (G, D,
// unit_bytes, stage_bytes, chunks). Activations are 32 bytes per row and band (16 fp16
// values, or a q8 record) with rows k * 2 bytes apart; lanes < 2 * rows copy one 16-byte
// half of one row's band, into rows a_stride words apart after the unit's trellis.
template <class L, int K>
struct unit_stream {
  uint32_t ring_s, ring_end, lst;  // the ring, the stage being filled
  int lane, ltk, tiles_k32;
  bool a_lane;
  int64_t band_bytes, wrap_bytes, a_wrap;
  const uint8_t* wsrc;
  const uint8_t* asrc;
  uint32_t a_off;

  __device__ __forceinline__ unit_stream(uint32_t ring, int lane_, int rows, int64_t u0, int64_t k, int64_t n,
                                         const uint8_t* trellis, const uint8_t* act)
      : ring_s(ring), ring_end(ring + L::D * L::stage_bytes), lst(ring), lane(lane_) {
    const int64_t tiles_k = k / 16, tiles_n = n / 16;
    tiles_k32 = static_cast<int>(tiles_k);
    a_lane = lane < 2 * rows;
    band_bytes = tiles_n * (32 * K);
    wrap_bytes = L::G * 32 * K - (tiles_k - 1) * band_bytes;
    a_wrap = -(tiles_k - 1) * 32;
    ltk = static_cast<int>(u0 % tiles_k);
    wsrc = trellis + ltk * band_bytes + (u0 / tiles_k) * (L::G * 32 * K) + lane * 16;
    asrc = act + (lane >> 1) * (k * 2) + ltk * 32 + (lane & 1) * 16;
    a_off = L::unit_bytes + (lane >> 1) * (a_stride * 4) + (lane & 1) * 16;
  }
  __device__ __forceinline__ void request_w(uint32_t stage) const {
#pragma unroll
    for (int c = 0; c < (L::chunks + 31) / 32; ++c)
      if (L::chunks % 32 == 0 || c * 32 + lane < L::chunks) cp_async_cg(stage + c * 512 + lane * 16, wsrc + c * 512);
  }
  __device__ __forceinline__ void request_a(uint32_t stage) const {
    if (a_lane) cp_async_ca(stage + a_off, asrc);
  }
  __device__ __forceinline__ void next_band() {
    const bool wrap = ++ltk == tiles_k32;
    ltk = wrap ? 0 : ltk;
    wsrc += wrap ? wrap_bytes : band_bytes;
    asrc += wrap ? a_wrap : 32;
  }
  __device__ __forceinline__ void advance() {
    lst = lst + L::stage_bytes == ring_end ? ring_s : lst + L::stage_bytes;
    next_band();
  }
  // The first D - 1 units of `count`: their weights before waiting on the previous kernel
  // (weights are constants), their activations (and the zeroed accumulators) after it.
  __device__ __forceinline__ void prologue(int count) {
    const uint8_t *w0 = wsrc, *a0 = asrc;
    const int t0 = ltk;
    uint32_t st = ring_s;
#pragma unroll
    for (int s = 0; s < L::D - 1; ++s) {
      if (s < count) request_w(st);
      st += L::stage_bytes;
      next_band();
    }
    wsrc = w0, asrc = a0, ltk = t0;
    detail::pdl_wait();
#pragma unroll
    for (int s = 0; s < L::D - 1; ++s) {
      if (s < count) request_a(lst);
      cp_commit();
      advance();
    }
  }
  // At iteration i, once stage i - 1 is read by every lane: unit i + D - 1 goes into it.
  __device__ __forceinline__ void refill(int i, int count) {
    if (i + L::D - 1 < count) {
      request_w(lst);
      request_a(lst);
    }
    cp_commit();
    advance();
  }
};

// A warp's flush: its fp32 accumulators c (tile columns g and g + 8 of G tiles, activation
// rows 8r + 2q and 8r + 2q + 1) plus extra[r][0 / 1] (one value per activation row, added to
// every column) go into acc [rows][n] at column group tp with atomics; c is zeroed.
template <int G, int RB>
__device__ __forceinline__ void flush_columns(float* acc, int64_t tp, int64_t n, int rows, int g, int q,
                                              float (&c)[G][RB][4], const float (&extra)[RB][2]) {
  float* p = acc + tp * (G * 16) + g;
#pragma unroll
  for (int t = 0; t < G; ++t)
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const int row = 8 * r + 2 * q;
      if (row < rows) {
        atomicAdd(p + row * n + t * 16, c[t][r][0] + extra[r][0]);
        atomicAdd(p + row * n + t * 16 + 8, c[t][r][2] + extra[r][0]);
      }
      if (row + 1 < rows) {
        atomicAdd(p + (row + 1) * n + t * 16, c[t][r][1] + extra[r][1]);
        atomicAdd(p + (row + 1) * n + t * 16 + 8, c[t][r][3] + extra[r][1]);
      }
#pragma unroll
      for (int i = 0; i < 4; ++i) c[t][r][i] = 0.0f;
    }
}

}  // namespace tandem::exl3::cuda::gemv_detail
