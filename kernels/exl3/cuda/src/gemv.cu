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
#include <algorithm>

#include "decode.cuh"
#include "tandem_exl3_cuda/exl3_cuda.hpp"

namespace tandem::exl3::cuda {
namespace {

constexpr int warps_per_block = 8;
constexpr int G = 4;           // tiles per unit (column-adjacent: 64 output columns)
constexpr int a_stride = 12;   // 32-bit words per activation row in shared memory (conflict-free)
constexpr int min_units_per_warp = 4;

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

struct occupancy {
  int blocks_per_sm = 0, sms = 0;
};

template <int K, int CB, int ROWS>
occupancy occupancy_of() {
  static occupancy cache[16];
  int dev = 0;
  cudaGetDevice(&dev);
  occupancy& o = cache[dev & 15];
  if (o.sms == 0) {
    using L = layout<K, ROWS>;
    cudaFuncSetAttribute(gemv_kernel<K, CB, ROWS>, cudaFuncAttributeMaxDynamicSharedMemorySize, L::block_bytes);
    cudaOccupancyMaxActiveBlocksPerMultiprocessor(&o.blocks_per_sm, gemv_kernel<K, CB, ROWS>,
                                                  warps_per_block * 32, L::block_bytes);
    cudaDeviceGetAttribute(&o.sms, cudaDevAttrMultiProcessorCount, dev);
    o.blocks_per_sm = std::max(o.blocks_per_sm, 1);
  }
  return o;
}

template <int K, int CB, int ROWS>
void launch_gemv(const dev_exl3& w, const __half* xh, int rows, float* acc, cudaStream_t stream) {
  using L = layout<K, ROWS>;
  const occupancy o = occupancy_of<K, CB, ROWS>();
  const int64_t units = (w.n / (G * 16)) * (w.k / 16);
  const int64_t want = std::max<int64_t>(1, (units + min_units_per_warp - 1) / min_units_per_warp);
  const int64_t warps = std::min<int64_t>(int64_t{o.blocks_per_sm} * o.sms * warps_per_block, want);
  const int blocks = static_cast<int>((warps + warps_per_block - 1) / warps_per_block);
  detail::launch_pdl(gemv_kernel<K, CB, ROWS>, dim3(blocks), dim3(warps_per_block * 32), L::block_bytes, stream,
                     reinterpret_cast<const uint8_t*>(w.trellis), xh, rows, w.k, w.n, acc, units,
                     blocks * warps_per_block);
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
               int64_t out, float* y, void* scratch, cudaStream_t stream) {
  for (int64_t r0 = 0; r0 < rows; r0 += exl3_gemv_max_rows) {  // 16 rows per pass
    const int64_t r = std::min(exl3_gemv_max_rows, rows - r0);
    auto* xh = static_cast<__half*>(scratch);
    auto* acc = reinterpret_cast<float*>(static_cast<uint8_t*>(scratch) + align256(static_cast<size_t>(r * w.k) * 2));
    exl3_input_transform(w, x + r0 * in, r, in, xh, acc, stream);
    exl3_gemv_rotated(w, xh, r, acc, stream);
    exl3_output_transform(w, acc, r, col_to_out, out, y + r0 * out, stream);
  }
}

}  // namespace tandem::exl3::cuda
