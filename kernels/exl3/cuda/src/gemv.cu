// EXL3 fused decode + GEMV for 1..16 rows (decode and speculative verification).
//
// Design
//  - Work: the weight's 16x16 tiles in units of G = 4 column-adjacent tiles (64 output
//    columns, 128K contiguous bytes). Units are ordered k-fastest (tp = column group, tk =
//    16-row band)
//    and split evenly over every warp of a grid that fills the GPU once (stream-K, spec
//    §6.1): each SM streams the same number of trellis bytes whatever the shape. A warp
//    accumulates its columns in mma registers while tk advances and adds them to the f32
//    accumulator with atomics when its column group changes or its range ends (at most
//    a few flushes per warp; the summation order therefore varies between runs).
//  - Loads: each warp owns a ring of D shared-memory stages filled by 16-byte cp.async
//    (trellis with .cg, the 16 activation columns of the unit's tk with .ca); D-1 units are
//    in flight per warp, no block barriers anywhere. The trellis of the first D-1 units is
//    requested before griddepcontrol.wait (weights are constants), the activations after.
//  - Decode: lane l reads the 2 (K <= 4) or 3 words holding its window from shared memory,
//    extracts its 8 states with shifts / funnel shifts / byte permutes at compile-time bit
//    offsets (decode.cuh), and turns pairs of states into fp16x2 with the codebook; the 8
//    states ARE its B fragments of Ŵ for m16n8k16 (the tile is stored in fragment order,
//    spec §3.2 step 4): no shuffles. The product runs transposed (acc^T = Ŵ^T x^T, see
//    gemv_kernel), where the same registers are the A fragment of Ŵ^T: one mma per tile
//    covers 16 columns x 8 rows with no zero padding, fp32 accumulation. 9..16 rows reuse
//    the decoded fragment in a second mma, so their cost over 1 row is one mma per tile,
//    the extra activation loads and atomics.
//
// What limits it (SASS of this file, nvdisasm; K=4 MUL1, 1..8 rows):
//  - the hot loop is 228 instructions per unit = 4 tiles = 32 states per lane: 7.1 per
//    weight. Decode proper is ~5: per state IMAD (s*M) + IDP.4A (byte sum) + ~1.6 integer
//    ALU ops to extract the state (SHF/LOP3/PRMT at compile-time offsets; K=4 and 8 have
//    lane-independent offsets, the others first normalize the window with 2-3 funnel
//    shifts), per pair one IMAD (pack) + one HFMA2, per tile 2-3 LDS + 1 HMMA (2 for 9-16
//    rows). The rest (~2 per weight) is the ring/cp.async bookkeeping and moves.
//    3INST/MCG: a LOP3 per state and 2 PRMT + HADD2 per pair instead of IDP + pack + HFMA2.
//  - H200: 132 SMs x 4 schedulers x ~1.75 GHz = ~0.92 T warp-instructions/s, i.e. ~4.2 T
//    weights/s at 7.1 per weight; IMAD + IDP (~125 of the 228) share the half-rate
//    FMA-heavy pipe, about as busy as the issue slot. An 8192x8192 matrix (67 M weights)
//    then needs ~16 us of issue, while its trellis (K/8 bytes per weight: 33.5 MB at K=4)
//    streams in ~8 us at ~4.2 TB/s. So on Hopper the kernel is decode-bound for K <= ~7
//    (as exllamav3's is, spec §7): expected ~15-18 us at K=4 (45-55% of copy bandwidth,
//    vs exllamav3's 34.7 us), about the same time at every K (higher K: more bytes, same
//    decode), and 8-16 rows ~1.0-1.3x the 1-row time (decode is per weight, not per row).
//  - GB10 (48 SMs, ~2.4 GHz boost, 273 GB/s, ~230 GB/s readable): issue budget
//    48 x 4 x 2.4e9 = 0.46 T warp-instr/s = ~2.1 T weights/s at 7.1 instr/weight, while
//    memory delivers 230e9 * 8/K weights/s = 0.46 T weights/s at K=4 (0.92 T at K=2,
//    1.8 T at K=1). Decode takes ~22% of the issue slots at K=4 (~45% at K=2), so GB10 is
//    memory-bound at every K (8192^2 at K=4: ~146 us) and what matters is the bytes in
//    flight per SM (ring depth x warps: ~45-85 KB per SM here).
//
// Variants (exl3_gemv_set_variant / TANDEM_EXL3_GEMV_VARIANT; 0 = the kernel above, the
// others are gemv_kernel_v below; all decode the same states to the same fp16 bits):
//  The H200 measured v0 at 27.2 us on 8192^2 K=4 (1 row, with both Hadamards) and 87.4 us
//  (84 us kernel-only) on 16384^2: ~71% of the issue-bound time above, and flat across K.
//  Reading the SASS, the per-unit picture of v0 (K=4 MUL1, 32 states per lane) is:
//   - FMA-heavy pipe (half rate: IMAD and IDP.4A both go there): 32 IMAD (s*M) + 32 IDP +
//     16 IMAD (pack) + ~20 IMAD.MOV/IADD/SHL that ptxas uses for moves and adds = ~100 of
//     the 228 instructions, i.e. ~200 of the ~228 issue cycles: the kernel is co-limited by
//     issue and by that pipe, which leaves little slack for the LDS -> mma latency chains;
//   - ptxas caps it at 64 registers and rematerializes the codebook constants and the lane
//     index (S2R, MOV) inside the loop;
//   - ~65 instructions per unit (2 per weight) are ring / cp.async / band bookkeeping, and
//     every warp first zeroes its ring's unused activation rows (~24 iterations of a div/mod
//     loop before the first copy is issued: ~5% of a warp's work on 8192^2).
//  Hot-loop SASS instructions per state per lane ("per weight" as above: a warp instruction
//  covers 32 weights) from `cuobjdump -sass` of this file for sm_90a, MUL1, 1..8 rows, the
//  loop's path without the flush (16 rows add one HMMA and 2 LDS per tile or unit):
//            K=2   K=3   K=4   K=6   K=8   regs (8 / 16 rows)   FMA-heavy share at K=4
//    v0      7.28  7.75  7.13  7.94  7.03  64 / 76              100 of 228
//    v1      7.44  7.31  7.25  7.66  7.00  64 / 80               80 of 232
//    v2      6.33  6.47  6.09  6.64  5.97  80 / 126             141 of 390
//    v3      6.31  6.45  5.94  6.66  5.78  79 / 128             144 of 380
//    v4      6.33  6.47  5.84  6.64  5.97  80 / 127             141 of 374
//    v5      6.31  6.45  5.69  6.66  5.78  79 / 128             144 of 364
//    v6      6.50  6.47  5.91  6.64  5.97  64 / 128 (K=2,4)     145 of 378
//  (ALU pipe, also half rate, at K=4: v0 ~67, v5 ~135 of 364: the PRMT pack moved there.)
//  v1 "lean" (G = 4): PRMT pack, 3 blocks/SM register cap (no spills), no ring zeroing,
//    copies issued at the top of the iteration. Same instruction count as v0; what it tests
//    is the pipe balance (FMA-heavy 200 -> 160 cycles per 228-cycle unit) and the prologue.
//    Prediction: 8192^2 K=4 ~24 us (from 27.2), 16384^2 ~80 us.
//  v2 "G8": v1 with units of 8 tiles: bookkeeping per weight halves (390 per 64 states).
//    Prediction: -15% instructions -> 8192^2 K=4 ~21 us, 16384^2 ~73 us (~46% of copy).
//  v3 "G8+pipe": v2 with the shared loads of tile t+2 (across the unit boundary) issued
//    while tile t decodes and the next copy issued into the stage just moved to registers
//    (D units in flight instead of D-1). -2.5% instructions; the rest of its effect is
//    latency hiding that SASS counts cannot show. Prediction: ~20 us / ~70 us.
//  v4 "G8+extract": v2 with lane_states_x (K=4: 11 instead of 13 integer ops per 8 states;
//    K=2 compiles to the same count as v2 because ptxas already folds those shifts).
//    Prediction at K=4: ~20.5 us / ~71 us; other K as v2.
//  v5 "G8+pipe+extract": v3 + v4, the fewest instructions: 5.69 per weight at K=4 (-20%
//    from v0). Prediction: 8192^2 K=4 ~19.5 us with the Hadamards (~17 us kernel-only),
//    16384^2 ~69 us (~46% of copy) if the issue efficiency stays at v0's ~71%; 2x exllamav3
//    (<= 17.4 us) and 50% of copy (<= ~64 us) need ~80% efficiency on top. Flat across K
//    as before; 16 rows: one more HMMA per tile, but 2 blocks/SM (128 registers) instead
//    of 3, so expect 16/8-row ratios nearer 1.3 than v0's 1.15-1.2.
//  v6 "G8+extract+4blk": v4 at 64 registers and 4 blocks (32 warps) per SM for K = 1, 2, 4
//    (v4 itself elsewhere): +1% instructions for a third more warps per scheduler. If the
//    71% issue efficiency of v0 is latency (too few independent instructions per
//    scheduler), v6 beats v4 and v5 at K=4 (prediction ~19 us / ~66 us); if it is pipe
//    contention, v5 wins and v6 ~= v4.
//  (K=1/5/7, MCG and 3INST run the same variant code, not tabulated here; MCG at K=4:
//  v0 7.5, v5 6.16 per weight.)
//  What stays: IMAD + IDP.4A per state (2 FMA-heavy slots = 4 cycles per state per warp)
//  is the floor of MUL1 on this pipe; the byte sum has no cheaper form (IDP sums only 4
//  bytes of one register, and packing needs the one PRMT per pair that remains).
#include <algorithm>
#include <cstdlib>

#include "gemv_common.cuh"

namespace tandem::exl3::cuda {
namespace {

using namespace gemv_detail;
constexpr int G = 4;  // tiles per unit of gemv_kernel (column-adjacent: 64 output columns)
template <int K, int ROWS>
struct layout {
  static constexpr int unit_bytes = G * 32 * K;
  static constexpr int chunks = unit_bytes / 16;            // 16-byte copies per unit
  static constexpr int a_bytes = ROWS * a_stride * 4;
  static constexpr int stage_bytes = unit_bytes + a_bytes;  // both multiples of 16
  static constexpr int D = K <= 2 ? 12 : K <= 5 ? 8 : 6;    // stages per warp
  static constexpr int warp_bytes = D * stage_bytes;
  static constexpr int block_bytes = warps_per_block * warp_bytes;
};

// c[16 x 8] += a[16 x 16] b[16 x 8], f16 operands, f32 accumulators.
__device__ __forceinline__ void mma16816(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

// The product runs transposed, acc^T (16 tile columns x 8 activation rows) = Ŵ^T xh^T: a
// lane's B fragments of Ŵ (decode.cuh: b[0] = rows 2q,2q+1 / col g, b[1] = rows +8 / col g,
// b[2], b[3] = the same for col g+8) are exactly its A fragment of Ŵ^T in the order
// {b[0], b[2], b[1], b[3]}, and the activations are the B operand (xh row g, k 2q.. and
// 2q+8..). One mma per tile serves 8 rows with no zero padding; rows 8..15 take a second.
// Accumulator c[t][0..1] = tile column g, rows 2q, 2q+1; c[t][2..3] = column g+8.
template <int K, int CB, int ROWS>
__global__ void __launch_bounds__(warps_per_block * 32)
    gemv_kernel(const uint8_t* __restrict__ trellis, const __half* __restrict__ xh, int rows, int64_t k,
                int64_t n, float* __restrict__ acc, int64_t units, int total_warps) {
  using L = layout<K, ROWS>;
  constexpr int D = L::D;
  constexpr int RB = ROWS / 8;  // mma per tile
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  uint8_t* ring = smem + warp * L::warp_bytes;
  const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(ring));
  const int64_t gw = int64_t{blockIdx.x} * warps_per_block + warp;
  const int64_t u0 = units * gw / total_warps, u1 = units * (gw + 1) / total_warps;
  if (u0 >= u1) return;
  const int64_t tiles_k = k / 16, tiles_n = n / 16;
  const int tiles_k32 = static_cast<int>(tiles_k);

  // Activation rows >= rows stay zero in every stage (copies fill rows < rows only).
  for (int i = lane; i < D * ROWS * a_stride; i += 32) {
    const int stage = i / (ROWS * a_stride), e = i % (ROWS * a_stride);
    if (e / a_stride >= rows) reinterpret_cast<uint32_t*>(ring + stage * L::stage_bytes + L::unit_bytes)[e] = 0u;
  }

  // Next unit to request: its trellis and activation addresses, advanced incrementally
  // (tk + 1: one 16-row band down; past the last band: back to the top, G tiles right).
  const bool a_lane = lane < 2 * rows;
  const int64_t band_bytes = tiles_n * (32 * K);
  const int64_t wrap_bytes = G * 32 * K - (tiles_k - 1) * band_bytes;
  int ltk = static_cast<int>(u0 % tiles_k);
  const uint8_t* wsrc = trellis + ltk * band_bytes + (u0 / tiles_k) * (G * 32 * K) + lane * 16;
  const __half* asrc = xh + (lane >> 1) * k + ltk * 16 + (lane & 1) * 8;
  const uint32_t a_off = L::unit_bytes + (lane >> 1) * (a_stride * 4) + (lane & 1) * 16;
  uint32_t lst = ring_s;  // the stage being filled
  auto request = [&](uint32_t stage, const uint8_t* w, bool with_a) {
#pragma unroll
    for (int c = 0; c < (L::chunks + 31) / 32; ++c)
      if (L::chunks % 32 == 0 || c * 32 + lane < L::chunks) cp_async_cg(stage + c * 512 + lane * 16, w + c * 512);
    if (with_a && a_lane) cp_async_ca(stage + a_off, asrc);
  };
  auto advance = [&]() {
    lst = lst + L::stage_bytes == ring_s + D * L::stage_bytes ? ring_s : lst + L::stage_bytes;
    if (++ltk == tiles_k32) {
      ltk = 0;
      wsrc += wrap_bytes;
      asrc -= (tiles_k - 1) * 16;
    } else {
      wsrc += band_bytes;
      asrc += 16;
    }
  };

  const int count = static_cast<int>(u1 - u0);
  {  // the weights of the first D-1 units before waiting on the previous kernel
    const uint8_t* p = wsrc;
    int tk = ltk;
#pragma unroll
    for (int s = 0; s < D - 1; ++s) {
      if (s < count) request(ring_s + s * L::stage_bytes, p, false);
      if (++tk == tiles_k32) tk = 0, p += wrap_bytes;
      else p += band_bytes;
    }
  }
  detail::pdl_wait();  // xh and the zeroed accumulators come from the previous kernel
#pragma unroll
  for (int s = 0; s < D - 1; ++s) {
    if (s < count && a_lane) cp_async_ca(lst + a_off, asrc);
    cp_commit();
    advance();
  }

  const detail::lane_win<K> lw(lane);
  const int q = lane & 3, g = lane >> 2;
  float c[G][RB][4];
#pragma unroll
  for (int t = 0; t < G; ++t)
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[t][r][i] = 0.0f;

  auto flush = [&](int64_t tp) {
    float* p = acc + tp * (G * 16) + g;
#pragma unroll
    for (int t = 0; t < G; ++t)
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const int row = 8 * r + 2 * q;
        if (row < rows) {
          atomicAdd(p + row * n + t * 16, c[t][r][0]);
          atomicAdd(p + row * n + t * 16 + 8, c[t][r][2]);
        }
        if (row + 1 < rows) {
          atomicAdd(p + (row + 1) * n + t * 16, c[t][r][1]);
          atomicAdd(p + (row + 1) * n + t * 16 + 8, c[t][r][3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) c[t][r][i] = 0.0f;
      }
  };

  int64_t ctp = u0 / tiles_k;
  int ctk = static_cast<int>(u0 % tiles_k);
  // Shared addresses of this lane's operands within a stage.
  const uint32_t x_lds = L::unit_bytes + (g * a_stride + q) * 4;
  uint32_t w_lds[3];
#pragma unroll
  for (int j = 0; j < 3; ++j) w_lds[j] = lw.word[j] * 4;
  uint32_t sa = ring_s;  // the stage being computed
  for (int i = 0; i < count; ++i) {
    cp_wait<D - 2>();
    __syncwarp();
    uint32_t xb[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      xb[r][0] = lds32(sa + x_lds + r * (8 * a_stride * 4));
      xb[r][1] = lds32(sa + x_lds + r * (8 * a_stride * 4) + 16);
    }
#pragma unroll
    for (int t = 0; t < G; ++t) {
      uint32_t w[3];
#pragma unroll
      for (int j = 0; j < detail::geom<K>::win; ++j) w[j] = lds32(sa + t * 32 * K + w_lds[j]);
      uint32_t b[4];
      detail::lane_fragments<K, CB>(w, lw.shift, b);
      const uint32_t a[4] = {b[0], b[2], b[1], b[3]};
#pragma unroll
      for (int r = 0; r < RB; ++r) mma16816(c[t][r], a, xb[r][0], xb[r][1]);
    }
    if (i + D - 1 < count) request(lst, wsrc, true);
    cp_commit();
    advance();
    sa = sa + L::stage_bytes == ring_s + D * L::stage_bytes ? ring_s : sa + L::stage_bytes;
    if (++ctk == tiles_k32) {
      flush(ctp);
      ctk = 0, ++ctp;
    }
  }
  if (ctk != 0) flush(ctp);
  detail::pdl_trigger();
}

// ---- Variants 1..6 (TANDEM_EXL3_GEMV_VARIANT; 0 = gemv_kernel above) ----------------------
// Same decode (the states of lane_states<K> and the codebook arithmetic, bit for bit), same
// mma, same stream-K split and atomic flushes; they differ only in how the instructions
// around the decode are spent (see the header comment for the SASS counts):
//  1 "lean": G = 4 as above, but (a) the MUL1 pair is packed with PRMT (ALU pipe) instead of
//    IMAD (FMA-heavy pipe, which IMAD + IDP.4A of every state already load to ~85% of the
//    issue rate), (b) __launch_bounds__ with a minimum of 3 blocks so ptxas may use up to 80
//    registers instead of capping itself at 64 and rematerializing constants in the loop,
//    (c) no zeroing of the unused activation rows (the mma's output column j depends only on
//    activation row j, and rows >= `rows` are never flushed: garbage there cannot reach a
//    kept output), and (d) the next unit's copies are issued at the top of the iteration.
//  2 "G8": 1 with units of 8 tiles (128 columns, n is a multiple of 128): the ring, wait,
//    copy and band-advance bookkeeping and the activation loads are paid once per 8 tiles.
//  3 "G8+pipe": 2 with the shared loads software-pipelined across tiles and units: the
//    window words of tile t+P (P = 2, wrapping into the next unit's stage) are loaded while
//    tile t decodes, so a unit never starts with an LDS -> extract -> IMAD -> IDP -> mma
//    chain on a cold load; the copy of unit i+D then goes into stage i, already in registers.
//  4 "G8+extract": 2 with lane_states_x (fewer integer ops per state at K = 4).
//  5 "G8+pipe+extract": 3 + 4.
//  6 "G8+extract+4blk": 4 with a 64-register cap and one stage less at K = 1, 2, 4 (8 rows),
//    so 4 blocks (32 warps) fit an SM instead of 3: more warps to hide the dependency chains.
template <int V>
struct vcfg;  // G: tiles per unit; P: tiles of shared loads in flight ahead; X: extraction;
                // MB: blocks per SM that the register cap allows at <= 8 rows
template <>
struct vcfg<1> {
  static constexpr int G = 4, P = 0, X = 0, MB = 3;
};
template <>
struct vcfg<2> {
  static constexpr int G = 8, P = 0, X = 0, MB = 3;
};
template <>
struct vcfg<3> {
  static constexpr int G = 8, P = 2, X = 0, MB = 3;
};
template <>
struct vcfg<4> {
  static constexpr int G = 8, P = 0, X = 1, MB = 3;
};
template <>
struct vcfg<5> {
  static constexpr int G = 8, P = 2, X = 1, MB = 3;
};
template <>
struct vcfg<6> {
  static constexpr int G = 8, P = 0, X = 1, MB = 4;
};

template <int K, int ROWS, int V>
struct vlayout {
  static constexpr int G = vcfg<V>::G;
  static constexpr int unit_bytes = G * 32 * K;
  static constexpr int chunks = unit_bytes / 16;
  static constexpr int a_bytes = ROWS * a_stride * 4;
  static constexpr int stage_bytes = unit_bytes + a_bytes;
  // About the same trellis bytes in flight per warp as gemv_kernel's ring (3-6 KB); one
  // stage less with 4 blocks per SM (4 x 8 warps x 4 stages x 1408 B fit the 228 KB at K=4).
  // MB 4 only where 64 registers hold the loop without spills (K = 1, 2, 4: the other K
  // normalize their window with lane-dependent funnel shifts and spill 20-28 bytes there).
  // 16 rows: 3 blocks where 80 registers suffice (G = 4, as gemv_kernel's 76), else 2.
  static constexpr int mb = ROWS <= 8 ? (vcfg<V>::MB > 3 && (K <= 2 || K == 4) ? 4 : 3) : G == 4 ? 3 : 2;
  static constexpr int D = G == 4 ? (K <= 2 ? 12 : K <= 5 ? 8 : 6)
                                  : (K <= 2 ? 7 : K <= 5 ? 5 : 4) - (mb > 3 ? 1 : 0);
  static constexpr int warp_bytes = D * stage_bytes;
  static constexpr int block_bytes = warps_per_block * warp_bytes;
  static constexpr int min_blocks = mb;  // register cap 80 (64 at 4 blocks) / 128
};

// decode2<CB> of decode.cuh with the MUL1 pair packed by PRMT: d0, d1 < 0x10000, so
// prmt(d0, d1, 0x5410) = d1 << 16 | d0, the same bits as the IMAD.
template <int CB>
__device__ __forceinline__ uint32_t decode2_alu(uint32_t s0, uint32_t s1) {
  if constexpr (CB == 2) {
    const uint32_t d0 = __dp4a(s0 * 0x83DCD12Du, 0x01010101u, 0x6400u);
    const uint32_t d1 = __dp4a(s1 * 0x83DCD12Du, 0x01010101u, 0x6400u);
    uint32_t p, r;
    asm("prmt.b32 %0, %1, %2, 0x5410;" : "=r"(p) : "r"(d0), "r"(d1));
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(p), "r"(0x1EEE1EEEu), "r"(0xC931C931u));
    return r;
  } else {
    return detail::decode2<CB>(s0, s1);
  }
}

template <int K, int CB, int X>
__device__ __forceinline__ void lane_fragments_alu(const uint32_t* w, int shift, uint32_t b[4]) {
  uint32_t s[8];
  if constexpr (X == 1) lane_states_x<K>(w, shift, s);
  else detail::lane_states<K>(w, shift, s);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = decode2_alu<CB>(s[2 * i], s[2 * i + 1]);
}

template <int K, int CB, int ROWS, int V>
__global__ void __launch_bounds__(warps_per_block * 32, vlayout<K, ROWS, V>::min_blocks)
    gemv_kernel_v(const uint8_t* __restrict__ trellis, const __half* __restrict__ xh, int rows, int64_t k,
                  int64_t n, float* __restrict__ acc, int64_t units, int total_warps) {
  using L = vlayout<K, ROWS, V>;
  constexpr int G = L::G, D = L::D, P = vcfg<V>::P, WIN = detail::geom<K>::win;
  constexpr int RB = ROWS / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const uint32_t ring_s = static_cast<uint32_t>(__cvta_generic_to_shared(smem + warp * L::warp_bytes));
  const uint32_t ring_end = ring_s + D * L::stage_bytes;
  const int64_t gw = int64_t{blockIdx.x} * warps_per_block + warp;
  const int64_t u0 = units * gw / total_warps, u1 = units * (gw + 1) / total_warps;
  if (u0 >= u1) return;
  const int64_t tiles_k = k / 16, tiles_n = n / 16;
  const int tiles_k32 = static_cast<int>(tiles_k);
  const int count = static_cast<int>(u1 - u0);

  // Next unit to request (as in gemv_kernel): trellis and activation sources, advanced one
  // 16-row band at a time, wrapping to the top of the next column group.
  const bool a_lane = lane < 2 * rows;
  const int64_t band_bytes = tiles_n * (32 * K);
  const int64_t wrap_bytes = G * 32 * K - (tiles_k - 1) * band_bytes;
  const int64_t a_wrap = -(tiles_k - 1) * 16;
  int ltk = static_cast<int>(u0 % tiles_k);
  const uint8_t* wsrc = trellis + ltk * band_bytes + (u0 / tiles_k) * (G * 32 * K) + lane * 16;
  const __half* asrc = xh + (lane >> 1) * k + ltk * 16 + (lane & 1) * 8;
  const uint32_t a_off = L::unit_bytes + (lane >> 1) * (a_stride * 4) + (lane & 1) * 16;
  uint32_t lst = ring_s;  // the stage being filled
  auto request_w = [&](uint32_t stage) {
#pragma unroll
    for (int c = 0; c < (L::chunks + 31) / 32; ++c)
      if (L::chunks % 32 == 0 || c * 32 + lane < L::chunks) cp_async_cg(stage + c * 512 + lane * 16, wsrc + c * 512);
  };
  auto advance = [&]() {
    lst = lst + L::stage_bytes == ring_end ? ring_s : lst + L::stage_bytes;
    const bool wrap = ++ltk == tiles_k32;
    ltk = wrap ? 0 : ltk;
    wsrc += wrap ? wrap_bytes : band_bytes;
    asrc += wrap ? a_wrap : 16;
  };

  // Prologue: the weights of the first units before waiting on the previous kernel (they are
  // constants), then their activations. With P > 0 (variants 3, 5) D units are in flight
  // (stage i is free once its words are in registers), else D - 1 (stage i is read during
  // iteration i).
  constexpr int pre = P > 0 ? D : D - 1;
  {
    const uint8_t* w0 = wsrc;
    const int t0 = ltk;
    uint32_t st = ring_s;
#pragma unroll
    for (int s = 0; s < pre; ++s) {
      if (s < count) request_w(st);
      st += L::stage_bytes;
      const bool wrap = ++ltk == tiles_k32;
      ltk = wrap ? 0 : ltk;
      wsrc += wrap ? wrap_bytes : band_bytes;
    }
    wsrc = w0, ltk = t0;
  }
  detail::pdl_wait();  // xh and the zeroed accumulators come from the previous kernel
#pragma unroll
  for (int s = 0; s < pre; ++s) {
    if (s < count && a_lane) cp_async_ca(lst + a_off, asrc);
    cp_commit();
    advance();
  }

  const detail::lane_win<K> lw(lane);
  const int q = lane & 3, g = lane >> 2;
  float c[G][RB][4];
#pragma unroll
  for (int t = 0; t < G; ++t)
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[t][r][i] = 0.0f;

  auto flush = [&](int64_t tp) {
    float* p = acc + tp * (G * 16) + g;
#pragma unroll
    for (int t = 0; t < G; ++t)
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        const int row = 8 * r + 2 * q;
        if (row < rows) {
          atomicAdd(p + row * n + t * 16, c[t][r][0]);
          atomicAdd(p + row * n + t * 16 + 8, c[t][r][2]);
        }
        if (row + 1 < rows) {
          atomicAdd(p + (row + 1) * n + t * 16, c[t][r][1]);
          atomicAdd(p + (row + 1) * n + t * 16 + 8, c[t][r][3]);
        }
#pragma unroll
        for (int i = 0; i < 4; ++i) c[t][r][i] = 0.0f;
      }
  };

  int64_t ctp = u0 / tiles_k;
  int ctk = static_cast<int>(u0 % tiles_k);
  const uint32_t x_lds = L::unit_bytes + (g * a_stride + q) * 4;
  uint32_t w_lds[3];
#pragma unroll
  for (int j = 0; j < 3; ++j) w_lds[j] = lw.word[j] * 4;
  uint32_t sa = ring_s;  // the stage being computed

  auto load_x = [&](uint32_t stage, uint32_t xb[RB][2]) {
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      xb[r][0] = lds32(stage + x_lds + r * (8 * a_stride * 4));
      xb[r][1] = lds32(stage + x_lds + r * (8 * a_stride * 4) + 16);
    }
  };
  auto load_w = [&](uint32_t stage, int t, uint32_t w[3]) {
#pragma unroll
    for (int j = 0; j < WIN; ++j) w[j] = lds32(stage + t * 32 * K + w_lds[j]);
  };
  auto tile = [&](int t, const uint32_t w[3], const uint32_t xb[RB][2]) {
    uint32_t b[4];
    lane_fragments_alu<K, CB, vcfg<V>::X>(w, lw.shift, b);
    const uint32_t a[4] = {b[0], b[2], b[1], b[3]};
#pragma unroll
    for (int r = 0; r < RB; ++r) mma16816(c[t][r], a, xb[r][0], xb[r][1]);
  };
  auto next_tile = [&]() {
    if (++ctk == tiles_k32) {
      flush(ctp);
      ctk = 0, ++ctp;
    }
  };

  if constexpr (P == 0) {
    for (int i = 0; i < count; ++i) {
      cp_wait<D - 2>();  // unit i has landed
      __syncwarp();      // and every lane is done reading stage i - 1 (lst)
      if (i + D - 1 < count) {
        request_w(lst);
        if (a_lane) cp_async_ca(lst + a_off, asrc);
      }
      cp_commit();
      advance();
      uint32_t xb[RB][2];
      load_x(sa, xb);
#pragma unroll
      for (int t = 0; t < G; ++t) {
        uint32_t w[3];
        load_w(sa, t, w);
        tile(t, w, xb);
      }
      sa = sa + L::stage_bytes == ring_end ? ring_s : sa + L::stage_bytes;
      next_tile();
    }
  } else {
    // Registers hold the words of the next P tiles (pw) and the activations of the unit being
    // computed (xb) and of the next one (xn, loaded with the first tile of it that is
    // prefetched). Unit i + 1 must have landed before tile G - P of unit i.
    cp_wait<D - 1>();
    __syncwarp();
    uint32_t pw[P][3], xb[RB][2], xn[RB][2];
    load_x(sa, xb);
#pragma unroll
    for (int t = 0; t < P; ++t) load_w(sa, t, pw[t]);
    for (int i = 0; i < count; ++i) {
      const uint32_t sn = sa + L::stage_bytes == ring_end ? ring_s : sa + L::stage_bytes;
      cp_wait<D - 2>();  // unit i + 1 has landed
      __syncwarp();
#pragma unroll
      for (int t = 0; t < G; ++t) {
        uint32_t w[3];
#pragma unroll
        for (int j = 0; j < 3; ++j) w[j] = pw[t % P][j];
        // Refill the slot just freed with tile t + P (of this unit or the next).
        if (t + P < G) load_w(sa, t + P, pw[t % P]);
        else {
          if (t + P == G) load_x(sn, xn);
          load_w(sn, t + P - G, pw[t % P]);
        }
        tile(t, w, xb);
      }
      // Every lane has read all of stage i (its words are in registers): refill it with unit
      // i + D. The __syncwarp orders those reads before the other lanes' copies.
      __syncwarp();
      if (i + D < count) {
        request_w(sa);
        if (a_lane) cp_async_ca(sa + a_off, asrc);
      }
      cp_commit();
      advance();
#pragma unroll
      for (int r = 0; r < RB; ++r) xb[r][0] = xn[r][0], xb[r][1] = xn[r][1];
      sa = sn;
      next_tile();
    }
  }
  if (ctk != 0) flush(ctp);
  detail::pdl_trigger();
}

template <int K, int CB, int ROWS>
void launch_gemv(const dev_exl3& w, const __half* xh, int rows, float* acc, cudaStream_t stream, int variant) {
  switch (variant) {
    case 1:
      launch_units<gemv_kernel_v<K, CB, ROWS, 1>>(w, vlayout<K, ROWS, 1>::G, vlayout<K, ROWS, 1>::block_bytes, xh,
                                                  rows, acc, stream);
      break;
    case 2:
      launch_units<gemv_kernel_v<K, CB, ROWS, 2>>(w, vlayout<K, ROWS, 2>::G, vlayout<K, ROWS, 2>::block_bytes, xh,
                                                  rows, acc, stream);
      break;
    case 3:
      launch_units<gemv_kernel_v<K, CB, ROWS, 3>>(w, vlayout<K, ROWS, 3>::G, vlayout<K, ROWS, 3>::block_bytes, xh,
                                                  rows, acc, stream);
      break;
    case 4:
      launch_units<gemv_kernel_v<K, CB, ROWS, 4>>(w, vlayout<K, ROWS, 4>::G, vlayout<K, ROWS, 4>::block_bytes, xh,
                                                  rows, acc, stream);
      break;
    case 5:
      launch_units<gemv_kernel_v<K, CB, ROWS, 5>>(w, vlayout<K, ROWS, 5>::G, vlayout<K, ROWS, 5>::block_bytes, xh,
                                                  rows, acc, stream);
      break;
    case 6:
      launch_units<gemv_kernel_v<K, CB, ROWS, 6>>(w, vlayout<K, ROWS, 6>::G, vlayout<K, ROWS, 6>::block_bytes, xh,
                                                  rows, acc, stream);
      break;
    default:
      launch_units<gemv_kernel<K, CB, ROWS>>(w, G, layout<K, ROWS>::block_bytes, xh, rows, acc, stream);
      break;
  }
}

// The variant in force: set by exl3_gemv_set_variant, else TANDEM_EXL3_GEMV_VARIANT (read
// once), else default_variant: 4 (G8+extract), the fastest at K=4 on the H200 (afd383b:
// 23.0 us on 8192^2 against v0's 27.1, 44.4% of copy on 16384^2 against 36.3%; 8 / 16 rows
// within 1.12 / 1.38x of one row) and never slower than v0 at K = 2..8.
constexpr int default_variant = 4;
int& variant_slot() {
  static int v = [] {
    const char* e = std::getenv("TANDEM_EXL3_GEMV_VARIANT");
    const int x = e ? std::atoi(e) : default_variant;
    return x >= 0 && x < exl3_gemv_variants ? x : default_variant;
  }();
  return v;
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

void exl3_gemv_rotated(const dev_exl3& w, const __half* xh, int64_t rows, float* acc, cudaStream_t stream) {
  if (rows <= 0) return;
  const int r = static_cast<int>(rows);
  const int v = variant_slot();
  detail::dispatch_k_cb(w.K, w.cb, [&]<int K, int CB>() {
    if (r <= 8) launch_gemv<K, CB, 8>(w, xh, r, acc, stream, v);
    else launch_gemv<K, CB, 16>(w, xh, r, acc, stream, v);
  });
}

int exl3_gemv_variant() { return variant_slot(); }
void exl3_gemv_set_variant(int v) { variant_slot() = v >= 0 && v < exl3_gemv_variants ? v : default_variant; }
const char* exl3_gemv_variant_name(int v) {
  switch (v) {
    case 1: return "lean";
    case 2: return "G8";
    case 3: return "G8+pipe";
    case 4: return "G8+extract";
    case 5: return "G8+pipe+extract";
    case 6: return "G8+extract+4blk";
    default: return "base";
  }
}

size_t exl3_gemv_scratch_bytes(const dev_exl3& w, int64_t rows) {
  return align256(static_cast<size_t>(rows * w.k) * 2) + static_cast<size_t>(rows * w.n) * 4;
}

void exl3_gemv(const dev_exl3& w, const float* x, int64_t rows, int64_t in, const int32_t* col_to_out,
               int64_t out, float* y, void* scratch, cudaStream_t stream, bool q8_activations) {
  const bool q8 = q8_activations && exl3_gemv_q8_supported(w);
  for (int64_t r0 = 0; r0 < rows; r0 += exl3_gemv_max_rows) {  // 16 rows per pass
    const int64_t r = std::min(exl3_gemv_max_rows, rows - r0);
    auto* xh = static_cast<__half*>(scratch);  // or the q8 records: the same bytes
    auto* acc = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + align256(static_cast<size_t>(r * w.k) * 2));
    if (q8) {
      exl3_input_transform_q8(w, x + r0 * in, r, in, xh, acc, stream);
      exl3_gemv_rotated_q8(w, xh, r, acc, stream);
    } else {
      exl3_input_transform(w, x + r0 * in, r, in, xh, acc, stream);
      exl3_gemv_rotated(w, xh, r, acc, stream);
    }
    exl3_output_transform(w, acc, r, col_to_out, out, y + r0 * out, stream);
  }
}

}  // namespace tandem::exl3::cuda
