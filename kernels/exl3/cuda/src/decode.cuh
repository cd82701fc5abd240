#pragma once
// Device side of the EXL3 trellis decode (spec §3.2-3.3), shared by the GEMV and the
// reconstruct kernels. A tile is 8K 32-bit words (the stored int16 pairs read as little-
// endian uint32 are the big-endian stream words). Lane l of a warp owns positions
// 8l..8l+7, which is the mma.m16n8k16 B-fragment layout: its states are the 16-bit windows
// ending at ring bits (8l+j+1)K, all inside one window of 7K+16 bits that starts at bit
// 8lK+K-16 (mod 256K) and touches at most 2 (K <= 4) or 3 words.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <string>
#include <utility>

#include "tandem_cuda/pdl.cuh"

namespace tandem::exl3::cuda::detail {

template <int K>
struct geom {
  static constexpr int words = 8 * K;                  // 32-bit words per tile
  static constexpr int tile_bytes = 32 * K;
  static constexpr int win = K <= 4 ? 2 : 3;           // words a lane's window touches
  static constexpr bool fixed = K % 4 == 0;            // same bit offset for every lane
  static constexpr int fixed_shift = (K - 16) & 31;    // K=4: 20, K=8: 24
};

// Word indices (within the tile) and the bit offset of lane `lane`'s window.
template <int K>
struct lane_win {
  int word[3];
  int shift;
  __device__ __forceinline__ explicit lane_win(int lane) {
    const int b0 = 8 * lane * K + K - 16 + 256 * K;  // window start, made non-negative
    const int a = b0 >> 5;
#pragma unroll
    for (int i = 0; i < 3; ++i) word[i] = (a + i) % geom<K>::words;
    shift = b0 & 31;
  }
};

// 16 bits at bit offset O (from the MSB of v[0]) of the big-endian words v[], zero-extended.
template <int O>
__device__ __forceinline__ uint32_t ext16(const uint32_t* v) {
  constexpr int wi = O / 32, r = O % 32;
  if constexpr (r == 0) return v[wi] >> 16;
  else if constexpr (r == 16) return v[wi] & 0xffffu;
  else if constexpr (r == 8) return __byte_perm(v[wi], 0u, 0x4421);
  else if constexpr (r < 16) return (v[wi] >> (16 - r)) & 0xffffu;
  else return __funnelshift_l(v[wi + 1], v[wi], r) >> 16;
}

// The 8 states of a lane from its window words w[0..2] (w[2] unused for K <= 4).
template <int K>
__device__ __forceinline__ void lane_states(const uint32_t* w, int shift, uint32_t s[8]) {
  uint32_t v[3];
  if constexpr (geom<K>::fixed) {
    v[0] = w[0], v[1] = w[1], v[2] = geom<K>::win > 2 ? w[2] : 0u;
  } else {
    v[0] = __funnelshift_l(w[1], w[0], shift);
    if constexpr (geom<K>::win > 2) {
      v[1] = __funnelshift_l(w[2], w[1], shift);
      v[2] = w[2] << shift;
    } else {
      v[1] = w[1] << shift;
      v[2] = 0u;
    }
  }
  constexpr int base = geom<K>::fixed ? geom<K>::fixed_shift : 0;
  [&]<int... J>(std::integer_sequence<int, J...>) { ((s[J] = ext16<base + J * K>(v)), ...); }(
      std::make_integer_sequence<int, 8>{});
}

__device__ __forceinline__ uint32_t lop3_6a(uint32_t a, uint32_t b, uint32_t c) {  // (a & b) ^ c
  uint32_t d;
  asm("lop3.b32 %0, %1, %2, %3, 0x6A;" : "=r"(d) : "r"(a), "r"(b), "r"(c));
  return d;
}

// fp16x2 bits of two states (s0 in the low half) under codebook CB (0 3inst, 1 mcg, 2 mul1),
// each rounded once as exllamav3's dq does (§3.3).
template <int CB>
__device__ __forceinline__ uint32_t decode2(uint32_t s0, uint32_t s1) {
  if constexpr (CB == 2) {
    const uint32_t d0 = __dp4a(s0 * 0x83DCD12Du, 0x01010101u, 0x6400u);  // 0x6400 + byte sum
    const uint32_t d1 = __dp4a(s1 * 0x83DCD12Du, 0x01010101u, 0x6400u);
    uint32_t p;
    asm("mad.lo.u32 %0, %1, 65536, %2;" : "=r"(p) : "r"(d1), "r"(d0));  // d1 << 16 | d0, FMA pipe
    uint32_t r;
    // (1024 + bs) * k_inv + k_bias, one rounding: k_inv = 0x1EEE, k_bias = 0xC931.
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(p), "r"(0x1EEE1EEEu), "r"(0xC931C931u));
    return r;
  } else {
    const uint32_t x0 = CB == 0 ? s0 * 89226354u + 64248484u : s0 * 0xCBAC1FEDu;
    const uint32_t x1 = CB == 0 ? s1 * 89226354u + 64248484u : s1 * 0xCBAC1FEDu;
    const uint32_t y0 = lop3_6a(x0, 0x8FFF8FFFu, 0x3B603B60u), y1 = lop3_6a(x1, 0x8FFF8FFFu, 0x3B603B60u);
    const uint32_t lo = __byte_perm(y0, y1, 0x5410), hi = __byte_perm(y0, y1, 0x7632);
    uint32_t r;
    asm("add.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(lo), "r"(hi));
    return r;
  }
}

// A lane's 8 states as the B fragments of two m16n8k16 products: b[0], b[1] for output
// columns 0..7 of the tile (rows 2q, 2q+1 and 2q+8, 2q+9 with q = lane & 3, column lane / 4),
// b[2], b[3] for columns 8..15.
template <int K, int CB>
__device__ __forceinline__ void lane_fragments(const uint32_t* w, int shift, uint32_t b[4]) {
  uint32_t s[8];
  lane_states<K>(w, shift, s);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = decode2<CB>(s[2 * i], s[2 * i + 1]);
}

// c[16 x 8] += a[16 x 16] b[16 x 8], f16 operands, f32 accumulators.
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// Programmatic dependent launch, as backend.cuda's kernels use it (tandem_cuda/pdl.cuh).
__device__ __forceinline__ void pdl_wait() { tandem::cuda::pdl::wait(); }
__device__ __forceinline__ void pdl_trigger() { tandem::cuda::pdl::trigger(); }
template <class... KArgs, class... Args>
void launch_pdl(void (*kernel)(KArgs...), dim3 grid, dim3 block, size_t smem, cudaStream_t stream, Args&&... args) {
  tandem::cuda::pdl::launch(kernel, grid, block, smem, stream, std::forward<Args>(args)...);
}

// Calls f.template operator()<K, CB>() for the runtime K (1..8) and codebook (0..2).
template <class F>
void dispatch_k_cb(int K, int cb, F&& f) {
  auto by_cb = [&]<int KK>() {
    switch (cb) {
      case 0: f.template operator()<KK, 0>(); break;
      case 1: f.template operator()<KK, 1>(); break;
      default: f.template operator()<KK, 2>(); break;
    }
  };
  switch (K) {
    case 1: by_cb.template operator()<1>(); break;
    case 2: by_cb.template operator()<2>(); break;
    case 3: by_cb.template operator()<3>(); break;
    case 4: by_cb.template operator()<4>(); break;
    case 5: by_cb.template operator()<5>(); break;
    case 6: by_cb.template operator()<6>(); break;
    case 7: by_cb.template operator()<7>(); break;
    default: by_cb.template operator()<8>(); break;
  }
}

}  // namespace tandem::exl3::cuda::detail
