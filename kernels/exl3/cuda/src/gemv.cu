// EXL3 fused decode + GEMV for 1..16 rows on fp16 activations (decode and speculative
// verification). gemv_q8.cu is the int8-activation kernel for MUL1 weights, built on this one.
//
// Design
//  - Work: the weight's 16x16 tiles in units of G = 8 column-adjacent tiles (128 output
//    columns, 256K contiguous bytes). Units are ordered k-fastest (tp = column group, tk =
//    16-row band) and split evenly over every warp of a grid that fills the GPU once
//    (stream-K, spec §6.1): each SM streams the same number of trellis bytes whatever the
//    shape. A warp accumulates its columns in mma registers while tk advances and adds them
//    to the f32 accumulator with atomics when its column group changes or its range ends (at
//    most a few flushes per warp; the summation order therefore varies between runs).
//  - Loads: each warp owns a ring of D shared-memory stages filled by 16-byte cp.async
//    (trellis with .cg, the 16 activation columns of the unit's tk with .ca); D-1 units are
//    in flight per warp, no block barriers anywhere. The trellis of the first D-1 units is
//    requested before griddepcontrol.wait (weights are constants), the activations after.
//  - Decode: lane l reads the 2 (K <= 4) or 3 words holding its window from shared memory,
//    extracts its 8 states with shifts / funnel shifts / byte permutes at compile-time bit
//    offsets (decode.cuh, gemv_common.cuh's lane_states_x), and turns pairs of states into
//    fp16x2 with the codebook; the 8 states ARE its B fragments of Ŵ for m16n8k16 (the tile
//    is stored in fragment order, spec §3.2 step 4): no shuffles. The product runs
//    transposed (acc^T = Ŵ^T x^T), where the same registers are the A fragment of Ŵ^T: one
//    mma per tile covers 16 columns x 8 rows with no zero padding, fp32 accumulation. 9..16
//    rows reuse the decoded fragment in a second mma, so their cost over 1 row is one mma
//    per tile, the extra activation loads and atomics.
//  - Activation rows >= rows are never zeroed: an mma output column depends only on its own
//    activation row, and those rows are never flushed.
//
// What limits it (H200; session 5 measured seven implementations of this loop, the table
// and their SASS counts are in bench/RESULTS.md; this is the fastest, "variant 4"):
//  - the hot loop is 374 SASS instructions per unit = 8 tiles = 64 states per lane at K=4
//    MUL1: 5.84 per weight. Per state IMAD (s*M) + IDP.4A (byte sum) + ~1.4 integer ops to
//    extract it; per pair one PRMT (pack) + one HFMA2 (the affine map); per tile 2-3 LDS +
//    1 HMMA (2 for 9-16 rows); ~1.4 per weight of ring and cp.async bookkeeping.
//    3INST/MCG: a LOP3 per state and 2 PRMT + HADD2 per pair instead of IDP + pack + HFMA2.
//  - 132 SMs x 4 schedulers x ~1.75 GHz = ~0.92 T warp-instructions/s, i.e. ~5 T weights/s
//    at 5.84 per weight if every slot issued: 16384^2 (268 M weights) in ~53 us, measured
//    71 us (~75% issue efficiency; IMAD and IDP.4A share the half-rate FMA-heavy pipe).
//    Its trellis (134 MB at K=4) streams in ~32 us at ~4.2 TB/s, so on Hopper the kernel is
//    decode-bound for K <= ~7 (as exllamav3's is, spec §7) and its time is about the same
//    at every K. gemv_q8.cu removes the byte sums, the pack and the affine map.
//  - GB10 (48 SMs, ~2.4 GHz boost, 273 GB/s, ~230 GB/s readable): issue budget
//    48 x 4 x 2.4e9 = 0.46 T warp-instr/s = ~2.5 T weights/s, while memory delivers
//    230e9 * 8/K weights/s = 0.46 T weights/s at K=4 (0.92 T at K=2): memory-bound at every
//    K (8192^2 at K=4: ~146 us), so what matters there is the bytes in flight per SM (ring
//    depth x warps: ~45-85 KB per SM here).
#include <algorithm>
#include <cstdlib>

#include "gemv_common.cuh"

namespace tandem::exl3::cuda {
namespace {

using namespace gemv_detail;
using detail::mma16816;

constexpr int tiles_per_unit = 8;  // column-adjacent: 128 output columns (n is a multiple of 128)

template <int K, int ROWS>
struct layout {
  static constexpr int G = tiles_per_unit;
  static constexpr int unit_bytes = G * 32 * K;
  static constexpr int chunks = unit_bytes / 16;
  static constexpr int a_bytes = ROWS * a_stride * 4;
  static constexpr int stage_bytes = unit_bytes + a_bytes;
  // 3 blocks per SM at <= 8 rows (80 registers), 2 at 16 (~128); 3-6 KB of trellis in
  // flight per warp.
  static constexpr int min_blocks = ROWS <= 8 ? 3 : 2;
  static constexpr int D = K <= 2 ? 7 : K <= 5 ? 5 : 4;
  static constexpr int warp_bytes = D * stage_bytes;
  static constexpr int block_bytes = warps_per_block * warp_bytes;
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

template <int K, int CB>
__device__ __forceinline__ void lane_fragments_alu(const uint32_t* w, int shift, uint32_t b[4]) {
  uint32_t s[8];
  lane_states_x<K>(w, shift, s);
#pragma unroll
  for (int i = 0; i < 4; ++i) b[i] = decode2_alu<CB>(s[2 * i], s[2 * i + 1]);
}

template <int K, int CB, int ROWS>
__global__ void __launch_bounds__(warps_per_block * 32, layout<K, ROWS>::min_blocks)
    gemv_kernel(const uint8_t* __restrict__ trellis, const __half* __restrict__ xh, int rows, int64_t k,
                int64_t n, float* __restrict__ acc, int64_t units, int total_warps) {
  using L = layout<K, ROWS>;
  constexpr int G = L::G, D = L::D, WIN = detail::geom<K>::win;
  constexpr int RB = ROWS / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  const warp_span span = warp_span_of<L::warp_bytes>(smem, units, total_warps);
  if (span.count <= 0) return;
  const int lane = span.lane, count = span.count;
  const int64_t u0 = span.u0;
  const uint32_t ring_s = span.ring;
  const int tiles_k32 = static_cast<int>(k / 16);
  unit_stream<L, K> us(ring_s, lane, rows, u0, k, n, trellis, reinterpret_cast<const uint8_t*>(xh));
  us.prologue(count);

  const detail::lane_win<K> lw(lane);
  const int q = lane & 3, g = lane >> 2;
  float c[G][RB][4];
#pragma unroll
  for (int t = 0; t < G; ++t)
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) c[t][r][i] = 0.0f;

  const float none[RB][2] = {};
  auto flush = [&](int64_t tp) { flush_columns<G, RB>(acc, tp, n, rows, g, q, c, none); };

  int64_t ctp = u0 / tiles_k32;
  int ctk = static_cast<int>(u0 % tiles_k32);
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
    lane_fragments_alu<K, CB>(w, lw.shift, b);
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

  for (int i = 0; i < count; ++i) {
    cp_wait<D - 2>();  // unit i has landed
    __syncwarp();      // and every lane is done reading stage i - 1
    us.refill(i, count);
    uint32_t xb[RB][2];
    load_x(sa, xb);
#pragma unroll
    for (int t = 0; t < G; ++t) {
      uint32_t w[3];
      load_w(sa, t, w);
      tile(t, w, xb);
    }
    sa = sa + L::stage_bytes == us.ring_end ? ring_s : sa + L::stage_bytes;
    next_tile();
  }
  if (ctk != 0) flush(ctp);
  detail::pdl_trigger();
}

template <int K, int CB, int ROWS>
void launch_gemv(const dev_exl3& w, const __half* xh, int rows, float* acc, cudaStream_t stream) {
  launch_units<gemv_kernel<K, CB, ROWS>>(w, layout<K, ROWS>::G, layout<K, ROWS>::block_bytes, xh, rows, acc, stream);
}

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

}  // namespace

void exl3_gemv_rotated(const dev_exl3& w, const __half* xh, int64_t rows, float* acc, cudaStream_t stream) {
  if (rows <= 0) return;
  const int r = static_cast<int>(rows);
  detail::dispatch_k_cb(w.K, w.cb, [&]<int K, int CB>() {
    if (r <= 8) launch_gemv<K, CB, 8>(w, xh, r, acc, stream);
    else launch_gemv<K, CB, 16>(w, xh, r, acc, stream);
  });
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
