// EXL3 fused decode + GEMV for MUL1 weights with int8 activations ("q8"), 1..16 rows.
//
// Why: the fp16 kernel (gemv.cu) is bound by integer decode work, not memory. Per weight it
// spends IMAD (s * 0x83DCD12D) + IDP.4A (the byte sum) + half a pack + half an HFMA2 (the
// affine map to fp16), and IMAD and IDP.4A share the half-rate FMA-heavy pipe. But the MUL1
// value is affine in the byte sum: w = (1024 + bs) * k_inv + k_bias (spec §3.3, one fp16
// rounding), so with int8 activations q (x ≈ s·q)
//
//   Σ_k x_k w_kn = s·k_inv · Σ_k q_k bs_kn  +  s·c0 · Σ_k q_k,     c0 = 1024·k_inv + k_bias,
//
// and Σ_k q_k bs_kn = Σ_k Σ_j q_k · byte_j(s_kn · M) is an integer matrix product over the
// four bytes of each product, which the tensor core's u8 x s8 mma does: the bytes of a
// lane's 8 products ARE its A fragments of mma.m16n8k32 (below), so a state costs one IMAD
// and its extraction, and the byte sums, the pair packing and the affine map disappear.
// The second term is the same for every output column and is added when a warp flushes.
//
// Numerics: the weights are used unrounded ((1024 + bs)·k_inv + k_bias in fp32, not the fp16
// value exllamav3 rounds to: at most 2^-10 apart, below the activation error) and the
// activations are quantized to int8 per row and 128-block (the Hadamard block) after the
// input transform, round to nearest, scale max|x̂|/127, as llama.cpp's q8 activations for
// its quantized GEMVs. Accumulation is exact in int32 within a 128-block (≤ 128·1020·127 <
// 2^24, so the conversion to fp32 is exact too) and fp32 across blocks.
//
// Layout:
//  - Activations: exl3_input_transform_q8 writes one 32-byte record per row and 16-column
//    band: 16 int8 values, then fp32 {s·k_inv, s·c0·Σ band q, 0, 0} with s the scale of the
//    band's 128-block. A record is as large as the band's 16 fp16 values, so the records use
//    exactly gemv.cu's activation scratch and copies.
//  - Work split, ring, prologue and stream-K flushes as gemv.cu (gemv_common.cuh; units of G
//    column-adjacent tiles of one 16-row band, k-fastest; a private cp.async ring per warp).
//  - The product runs transposed as in gemv.cu: acc^T (16 tile columns x 8 rows) += Ŵ^T x^T.
//    mma.m16n8k32 u8 x s8: lane (g = lane/4, q = lane%4) holds A = bytes of 4 products at
//    (column g, k-slot q), (g+8, q), (g, q+4), (g+8, q+4); each k-slot is one weight row
//    spread over 4 byte positions. Its states s[0..7] are tile rows 2q, 2q+1, 2q+8, 2q+9 of
//    column g (s[0..3]) and g+8 (s[4..7]) (decode.cuh), so mma #0 takes the even rows
//    (slots j -> row 2j: A = {m0, m4, m2, m6}) and mma #1 the odd rows ({m1, m5, m3, m7});
//    B = the activation of row 2j (2j+1) of activation row g, its byte repeated 4 times.
//  - Integer accumulators are folded into fp32 ones (x s·k_inv of the block) at every
//    128-block end; the fp32 ones go out with atomics when the column group changes.
//
// Predicted (H200, K=4, 1 row): per state IMAD + ~1.4 extraction ops + 1/4 mma + LDS and
// bookkeeping, ~4.2 instructions against gemv.cu's 5.84, and one FMA-heavy op instead of
// ~2.5: about 30% less time at the same issue efficiency. Measured (bench_cuda_exl3, RESULTS,
// session 6): 7-15% less (8192^2 K=4 21.9 against 23.6 us; 16384^2 49.5% of copy against
// 43.1%): two blocks per SM instead of three (the int32 and fp32 accumulators take 116-128
// registers) leave fewer warps to hide the LDS -> IMAD -> mma chains. 16 rows take up to
// 1.55x one row (half-size units).
#include <algorithm>

#include "gemv_common.cuh"
#include "hadamard.cuh"

namespace tandem::exl3::cuda {
namespace {

using namespace gemv_detail;

constexpr int record_bytes = 32;  // per row and 16-column band: 16 x int8, then {alpha, beta, 0, 0}

// MUL1's fp16 constants (decode.cuh's decode2<2>, tandem_exl3/codebook.hpp), used as fp32 with
// c0 = 1024·k_inv + k_bias.
constexpr uint16_t mul1_k_inv_bits = 0x1EEE, mul1_k_bias_bits = 0xC931;

template <int K, int ROWS>
struct q8_layout {
  static constexpr int G = ROWS <= 8 ? 8 : 4;  // 16 rows: twice the accumulators, half the tiles
  static constexpr int unit_bytes = G * 32 * K;
  static constexpr int chunks = unit_bytes / 16;
  static constexpr int a_bytes = ROWS * a_stride * 4;  // a record per row, rows 48 B apart
  static constexpr int stage_bytes = unit_bytes + a_bytes;
  // Two blocks per SM (int32 + fp32 accumulators: ~116-128 registers): deeper rings than
  // gemv.cu's, for about the bytes in flight per SM of its three blocks.
  static constexpr int D = K <= 2 ? 10 : K <= 5 ? 7 : 5;
  static constexpr int warp_bytes = D * stage_bytes;
  static constexpr int block_bytes = warps_per_block * warp_bytes;
};

// c[16 x 8] += a[16 x 32] b[32 x 8]: a unsigned bytes, b signed bytes, int32 accumulators.
__device__ __forceinline__ void mma16832(int c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                         uint32_t b1) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

__device__ __forceinline__ uint32_t splat_byte(uint32_t v, uint32_t selector) {
  uint32_t r;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(r) : "r"(v), "r"(selector));
  return r;
}

__device__ __forceinline__ float2 lds64f(uint32_t addr) {
  float2 v;
  asm volatile("ld.shared.v2.f32 {%0, %1}, [%2];" : "=f"(v.x), "=f"(v.y) : "r"(addr));
  return v;
}

// One warp per 128-chunk of a row (lane t: elements 4t..4t+3), as hadamard.cu's input
// kernel, which makes the fp16 x̂ this quantizes (so the fp16 path and this one see the same
// rotated activations); then the chunk's int8 values and band records.
__global__ void __launch_bounds__(256) input_q8_kernel(const float* __restrict__ x, int64_t rows, int64_t in,
                                                       int64_t k, const __half* __restrict__ suh,
                                                       uint8_t* __restrict__ rec, float* __restrict__ zero_acc,
                                                       int64_t acc_count, float k_inv, float c0) {
  detail::pdl_wait();
  detail::pdl_trigger();
  if (zero_acc != nullptr) detail::zero_grid(zero_acc, acc_count);
  detail::chunk_pos c;
  if (!detail::chunk_of(rows, k, c)) return;
  const int lane = c.lane;
  const int64_t row = c.row, col = c.col;
  float v[4];
  detail::input_rotate(x, row, in, col, suh, lane, v);  // the fp16-rounded x̂, as f32
  float amax = fmaxf(fmaxf(fabsf(v[0]), fabsf(v[1])), fmaxf(fabsf(v[2]), fabsf(v[3])));
#pragma unroll
  for (int m = 16; m >= 1; m >>= 1) amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, m));
  const float inv = amax > 0.0f ? 127.0f / amax : 0.0f, scale = amax / 127.0f;
  uint32_t packed = 0;
  int sum = 0;
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int qv = min(127, max(-127, __float2int_rn(v[i] * inv)));
    packed |= (static_cast<uint32_t>(qv) & 0xffu) << (8 * i);
    sum += qv;
  }
  sum += __shfl_xor_sync(0xffffffffu, sum, 1);  // the band (16 values) is 4 lanes
  sum += __shfl_xor_sync(0xffffffffu, sum, 2);
  uint8_t* r = rec + (row * (k / 16) + col / 16) * record_bytes;
  *reinterpret_cast<uint32_t*>(r + (lane & 3) * 4) = packed;
  if ((lane & 3) == 0)
    *reinterpret_cast<float4*>(r + 16) = make_float4(scale * k_inv, scale * c0 * static_cast<float>(sum), 0.f, 0.f);
}

template <int K, int ROWS>
__global__ void __launch_bounds__(warps_per_block * 32, 2)
    gemv_q8_kernel(const uint8_t* __restrict__ trellis, const uint8_t* __restrict__ xq, int rows, int64_t k,
                   int64_t n, float* __restrict__ acc, int64_t units, int total_warps) {
  using L = q8_layout<K, ROWS>;
  constexpr int G = L::G, D = L::D, WIN = detail::geom<K>::win;
  constexpr int RB = ROWS / 8;
  extern __shared__ __align__(16) uint8_t smem[];
  const warp_span span = warp_span_of<L::warp_bytes>(smem, units, total_warps);
  if (span.count <= 0) return;
  const int lane = span.lane, count = span.count;
  const int64_t u0 = span.u0;
  const uint32_t ring_s = span.ring;
  const int tiles_k32 = static_cast<int>(k / 16);
  unit_stream<L, K> us(ring_s, lane, rows, u0, k, n, trellis, xq);
  us.prologue(count);

  const detail::lane_win<K> lw(lane);
  const int q = lane & 3, g = lane >> 2;
  // ci: this 128-block's exact sums; cf: fp32 sums of the folded blocks; bias: Σ of the
  // records' second field (s·c0·Σq) over the bands done, for activation rows 8r+2q, +1.
  int ci[G][RB][4];
  float cf[G][RB][4], bias[RB][2];
#pragma unroll
  for (int t = 0; t < G; ++t)
#pragma unroll
    for (int r = 0; r < RB; ++r)
#pragma unroll
      for (int i = 0; i < 4; ++i) ci[t][r][i] = 0, cf[t][r][i] = 0.0f;
#pragma unroll
  for (int r = 0; r < RB; ++r) bias[r][0] = bias[r][1] = 0.0f;

  auto flush = [&](int64_t tp) {
    flush_columns<G, RB>(acc, tp, n, rows, g, q, cf, bias);
#pragma unroll
    for (int r = 0; r < RB; ++r) bias[r][0] = bias[r][1] = 0.0f;
  };

  int64_t ctp = u0 / tiles_k32;
  int ctk = static_cast<int>(u0 % tiles_k32);
  uint32_t w_lds[3];
#pragma unroll
  for (int j = 0; j < 3; ++j) w_lds[j] = lw.word[j] * 4;
  // Bytes 2q, 2q+1 of a record are byte 2(q&1), +1 of its word q/2; 2q+8, 2q+9 of word q/2+2.
  const uint32_t x_word = L::unit_bytes + g * (a_stride * 4) + (q >> 1) * 4;
  const uint32_t sel0 = (2 * (q & 1)) * 0x1111u, sel1 = sel0 + 0x1111u;
  const uint32_t ab_lds = L::unit_bytes + 2 * q * (a_stride * 4) + 16;  // {alpha, beta} of row 2q
  uint32_t sa = ring_s;  // the stage being computed

  for (int i = 0; i < count; ++i) {
    cp_wait<D - 2>();  // unit i has landed
    __syncwarp();      // and every lane is done reading stage i - 1
    us.refill(i, count);
    uint32_t xs[RB][4];
    float2 ab[RB][2];
#pragma unroll
    for (int r = 0; r < RB; ++r) {
      const uint32_t lo = lds32(sa + x_word + r * (8 * a_stride * 4));
      const uint32_t hi = lds32(sa + x_word + r * (8 * a_stride * 4) + 8);
      xs[r][0] = splat_byte(lo, sel0), xs[r][1] = splat_byte(lo, sel1);  // rows 2q, 2q+1
      xs[r][2] = splat_byte(hi, sel0), xs[r][3] = splat_byte(hi, sel1);  // rows 2q+8, 2q+9
      ab[r][0] = lds64f(sa + ab_lds + r * (8 * a_stride * 4));
      ab[r][1] = lds64f(sa + ab_lds + r * (8 * a_stride * 4) + a_stride * 4);
    }
#pragma unroll
    for (int t = 0; t < G; ++t) {
      uint32_t w[3];
#pragma unroll
      for (int j = 0; j < WIN; ++j) w[j] = lds32(sa + t * 32 * K + w_lds[j]);
      uint32_t s[8];
      lane_states_x<K>(w, lw.shift, s);
#pragma unroll
      for (int j = 0; j < 8; ++j) s[j] *= 0x83DCD12Du;
#pragma unroll
      for (int r = 0; r < RB; ++r) {
        mma16832(ci[t][r], s[0], s[4], s[2], s[6], xs[r][0], xs[r][2]);  // even tile rows
        mma16832(ci[t][r], s[1], s[5], s[3], s[7], xs[r][1], xs[r][3]);  // odd tile rows
      }
    }
#pragma unroll
    for (int r = 0; r < RB; ++r) bias[r][0] += ab[r][0].y, bias[r][1] += ab[r][1].y;
    sa = sa + L::stage_bytes == us.ring_end ? ring_s : sa + L::stage_bytes;
    if ((ctk & 7) == 7 || i == count - 1) {  // a 128-block ends (or the range): fold it
#pragma unroll
      for (int t = 0; t < G; ++t)
#pragma unroll
        for (int r = 0; r < RB; ++r)
#pragma unroll
          for (int j = 0; j < 4; ++j) {
            const float a = (j & 1) ? ab[r][1].x : ab[r][0].x;
            cf[t][r][j] = fmaf(a, static_cast<float>(ci[t][r][j]), cf[t][r][j]);
            ci[t][r][j] = 0;
          }
    }
    if (++ctk == tiles_k32) {
      flush(ctp);
      ctk = 0, ++ctp;
    }
  }
  if (ctk != 0) flush(ctp);
  detail::pdl_trigger();
}

template <int K, int ROWS>
void launch_q8(const dev_exl3& w, const uint8_t* xq, int rows, float* acc, cudaStream_t stream) {
  using L = q8_layout<K, ROWS>;
  launch_units<gemv_q8_kernel<K, ROWS>>(w, L::G, L::block_bytes, xq, rows, acc, stream);
}

float f16_bits_to_f32(uint16_t b) {
  __half_raw r;
  r.x = b;
  return __half2float(__half(r));
}

}  // namespace

bool exl3_gemv_q8_supported(const dev_exl3& w) { return w.cb == 2; }

void exl3_input_transform_q8(const dev_exl3& w, const float* x, int64_t rows, int64_t in, void* xq,
                             float* zero_acc, cudaStream_t stream) {
  if (rows <= 0) return;
  const float k_inv = f16_bits_to_f32(mul1_k_inv_bits), k_bias = f16_bits_to_f32(mul1_k_bias_bits);
  const float c0 = 1024.0f * k_inv + k_bias;
  detail::launch_pdl(input_q8_kernel, dim3(detail::blocks_for_chunks(rows, w.k)), dim3(256), 0, stream, x, rows, in, w.k, w.suh,
                     static_cast<uint8_t*>(xq), zero_acc, rows * w.n, k_inv, c0);
}

void exl3_gemv_rotated_q8(const dev_exl3& w, const void* xq, int64_t rows, float* acc, cudaStream_t stream) {
  if (rows <= 0) return;
  const int r = static_cast<int>(rows);
  const auto* p = static_cast<const uint8_t*>(xq);
  detail::dispatch_k_cb(w.K, 2, [&]<int K, int CB>() {
    if (r <= 8) launch_q8<K, 8>(w, p, r, acc, stream);
    else launch_q8<K, 16>(w, p, r, acc, stream);
  });
}

}  // namespace tandem::exl3::cuda
