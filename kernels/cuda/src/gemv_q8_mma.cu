// Linears of 1..64 token rows on int8 tensor cores: the GEMV's arithmetic (x quantized to q8
// blocks as backend.cpu's quantize_q8, exact integer dots per 32-block, then d_w d_x dot +
// m_w s_x), with the integer dots of 16 output rows x 8 tokens done by one
// mma.m16n8k32 (s8 x s8 -> s32) per weight block instead of 8 dp4a per (row, token) pair.
//
// Why: the q8 GEMV runs every token row's dot products in turn on the lanes that read a
// weight block, so its time grows by ~0.7 us a row at the default model's shapes (the
// batch-8 decode step was 2.3x the batch-1 step, and a speculative verify step of 1 + k
// rows paid the same). Here 8 tokens cost one mma per block, so 8 rows cost about what 1
// does: the weights' bytes and the launch set the time.
//
// Fragments (PTX ISA, mma.m16n8k32 .s8; lane = 4 g + q): A (weights, 16 rows x 32) a0 =
// row g, bytes 4q..4q+3 of the block; a1 = row g + 8, the same bytes; a2, a3 = bytes 16 +
// 4q.. of rows g, g + 8. B (x, 32 x 8 tokens) b0 = token g, bytes 4q..4q+3; b1 = bytes
// 16 + 4q... C: c0, c1 = row g, tokens 2q, 2q + 1; c2, c3 = row g + 8, the same tokens. A
// Q4_1 block stores value j in the low nibble of byte j and value j + 16 in its high nibble,
// so lane q's one 32-bit load of bytes 4q..4q+3 gives a0 (low nibbles) and a2 (high
// nibbles) directly; Q8_0's bytes are the values.
//
// Work: a block of KW warps owns 16 output rows; warp k takes weight blocks k, k + KW, ...
// of the row (in order), every warp's partial sums go through shared memory and are added
// in warp order. A (row, token) output is therefore summed in an order fixed by the
// matrix's shape alone: the same bits whatever the other token rows are, and whether the
// launch has 1 or 64 of them.
#include <stdexcept>

#include "common.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

constexpr int tile_rows = 16;
constexpr int chunk_blocks = 4;  // weight blocks a warp requests before it computes any

__device__ __forceinline__ void mma_s8(int (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
  c[0] = c[1] = c[2] = c[3] = 0;
  asm("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

// One weight block of rows g and g + 8 of the tile, as this lane's A fragment and scales.
struct afrag {
  uint32_t a0 = 0, a1 = 0, a2 = 0, a3 = 0;
  float d0 = 0.0f, d1 = 0.0f, m0 = 0.0f, m1 = 0.0f;  // row g's and row g + 8's
};

template <wformat F>
__device__ __forceinline__ afrag load_afrag(const dev_matrix& w, int64_t r0, bool v0, int64_t r1, bool v1, int64_t b,
                                            int64_t nb, int q) {
  afrag f;
  if constexpr (F == wformat::q4_1) {
    const auto* qs = static_cast<const uint8_t*>(w.qs);
    const auto* sc = static_cast<const __half2*>(w.scales);
    // Read once: keep the weights out of the caches (as the GEMV does).
    const uint32_t x0 = v0 ? __ldcs(reinterpret_cast<const unsigned int*>(qs + (r0 * nb + b) * 16) + q) : 0u;
    const uint32_t x1 = v1 ? __ldcs(reinterpret_cast<const unsigned int*>(qs + (r1 * nb + b) * 16) + q) : 0u;
    f.a0 = x0 & 0x0f0f0f0fu, f.a2 = (x0 >> 4) & 0x0f0f0f0fu;
    f.a1 = x1 & 0x0f0f0f0fu, f.a3 = (x1 >> 4) & 0x0f0f0f0fu;
    if (v0) {
      const __half2 dm = __ldcs(sc + r0 * nb + b);
      f.d0 = __low2float(dm), f.m0 = __high2float(dm);
    }
    if (v1) {
      const __half2 dm = __ldcs(sc + r1 * nb + b);
      f.d1 = __low2float(dm), f.m1 = __high2float(dm);
    }
  } else {
    const auto* qs = static_cast<const int8_t*>(w.qs);
    const auto* sc = static_cast<const __half*>(w.scales);
    if (v0) {
      const auto* p = reinterpret_cast<const unsigned int*>(qs + (r0 * nb + b) * 32);
      f.a0 = __ldcs(p + q), f.a2 = __ldcs(p + 4 + q);
      f.d0 = __half2float(__ldcs(sc + r0 * nb + b));
    }
    if (v1) {
      const auto* p = reinterpret_cast<const unsigned int*>(qs + (r1 * nb + b) * 32);
      f.a1 = __ldcs(p + q), f.a3 = __ldcs(p + 4 + q);
      f.d1 = __half2float(__ldcs(sc + r1 * nb + b));
    }
  }
  return f;
}

// acc[j][0..3] (rows g, g, g + 8, g + 8 x tokens 8 j + 2q, 8 j + 2q + 1 alternating) +=
// block b's terms, for the NTILE tiles of 8 tokens.
template <int NTILE>
__device__ __forceinline__ void block_terms(const afrag& f, int64_t b, int64_t nb, int64_t in, int n,
                                            const int8_t* __restrict__ xq, const float2* __restrict__ ds, int g, int q,
                                            float (&acc)[NTILE][4]) {
#pragma unroll
  for (int j = 0; j < NTILE; ++j) {
    const int tb = 8 * j + g, t0 = 8 * j + 2 * q, t1 = t0 + 1;
    uint32_t b0 = 0u, b1 = 0u;
    if (tb < n) {
      const auto* p = reinterpret_cast<const unsigned int*>(xq + tb * in + b * 32);
      b0 = p[q], b1 = p[4 + q];
    }
    int c[4];
    mma_s8(c, f.a0, f.a1, f.a2, f.a3, b0, b1);
    const float2 x0 = t0 < n ? ds[t0 * nb + b] : make_float2(0.0f, 0.0f);
    const float2 x1 = t1 < n ? ds[t1 * nb + b] : make_float2(0.0f, 0.0f);
    acc[j][0] += f.d0 * x0.x * static_cast<float>(c[0]) + f.m0 * x0.y;
    acc[j][1] += f.d0 * x1.x * static_cast<float>(c[1]) + f.m0 * x1.y;
    acc[j][2] += f.d1 * x0.x * static_cast<float>(c[2]) + f.m1 * x0.y;
    acc[j][3] += f.d1 * x1.x * static_cast<float>(c[3]) + f.m1 * x1.y;
  }
}

template <wformat F, int NTILE, int KW>
__global__ void __launch_bounds__(KW * 32) gemv_q8_mma_kernel(dev_matrix w, const int8_t* __restrict__ xq,
                                                              const float2* __restrict__ ds, float* __restrict__ y,
                                                              int n, bool accumulate) {
  __shared__ float red[KW][NTILE * 8][tile_rows + 1];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int64_t nb = w.in / 32, row0 = int64_t{blockIdx.x} * tile_rows;
  const int64_t r0 = row0 + g, r1 = row0 + g + 8;
  const bool v0 = r0 < w.out, v1 = r1 < w.out;

  float acc[NTILE][4];
#pragma unroll
  for (int j = 0; j < NTILE; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  // The first chunk of weights is requested before waiting for the quantize kernel, so
  // its DRAM latency overlaps that kernel's tail.
  afrag f[chunk_blocks];
#pragma unroll
  for (int c = 0; c < chunk_blocks; ++c) {
    const int64_t b = warp + int64_t{KW} * c;
    if (b < nb) f[c] = load_afrag<F>(w, r0, v0, r1, v1, b, nb, q);
  }
  detail::pdl_wait();
  detail::pdl_trigger();
  for (int64_t b0 = warp; b0 < nb; b0 += int64_t{KW} * chunk_blocks) {
    if (b0 != warp) {
#pragma unroll
      for (int c = 0; c < chunk_blocks; ++c) {
        const int64_t b = b0 + int64_t{KW} * c;
        if (b < nb) f[c] = load_afrag<F>(w, r0, v0, r1, v1, b, nb, q);
      }
    }
#pragma unroll
    for (int c = 0; c < chunk_blocks; ++c) {
      const int64_t b = b0 + int64_t{KW} * c;
      if (b < nb) block_terms<NTILE>(f[c], b, nb, w.in, n, xq, ds, g, q, acc);
    }
  }
#pragma unroll
  for (int j = 0; j < NTILE; ++j) {
    const int t0 = 8 * j + 2 * q;
    red[warp][t0][g] = acc[j][0];
    red[warp][t0 + 1][g] = acc[j][1];
    red[warp][t0][g + 8] = acc[j][2];
    red[warp][t0 + 1][g + 8] = acc[j][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < n * tile_rows; i += KW * 32) {
    const int t = i / tile_rows, r = i % tile_rows;
    const int64_t row = row0 + r;
    if (row >= w.out) continue;
    float s = red[0][t][r];
#pragma unroll
    for (int k = 1; k < KW; ++k) s += red[k][t][r];
    float* o = detail::out_at(w, y, n, t, row);
    *o = accumulate ? *o + s : s;
  }
}

template <wformat F, int NTILE>
void launch_tiles(const dev_matrix& w, const int8_t* xq, const float2* ds, float* y, int64_t n, bool accumulate,
                  cudaStream_t s) {
  const int64_t tiles = (w.out + tile_rows - 1) / tile_rows;
  const dim3 grid(static_cast<unsigned>(tiles));
  // Fewer tiles than two per SM (132 on the H200): more warps split each row's blocks.
  if (tiles < 264)
    detail::launch_pdl(gemv_q8_mma_kernel<F, NTILE, 8>, grid, dim3(8 * 32), 0, s, w, xq, ds, y, static_cast<int>(n),
                       accumulate);
  else
    detail::launch_pdl(gemv_q8_mma_kernel<F, NTILE, 4>, grid, dim3(4 * 32), 0, s, w, xq, ds, y, static_cast<int>(n),
                       accumulate);
}

template <wformat F>
void launch(const dev_matrix& w, const int8_t* xq, const float2* ds, float* y, int64_t n, bool accumulate,
            cudaStream_t s) {
  if (n <= 8) launch_tiles<F, 1>(w, xq, ds, y, n, accumulate, s);
  else if (n <= 16) launch_tiles<F, 2>(w, xq, ds, y, n, accumulate, s);
  else if (n <= 32) launch_tiles<F, 4>(w, xq, ds, y, n, accumulate, s);
  else launch_tiles<F, 8>(w, xq, ds, y, n, accumulate, s);
}

}  // namespace

void gemv_q8_mma(const dev_matrix& w, const float* x, int64_t n, bool accumulate, float* y, void* scratch,
                 cudaStream_t stream) {
  if (n == 0 || w.out == 0) return;
  if (!gemv_q8_supported(w)) throw std::invalid_argument("gemv_q8_mma: q4_1 or q8_0 weights with in % 32 == 0 only");
  if (n < 0 || n > gemv_q8_mma_max_tokens) throw std::invalid_argument("gemv_q8_mma: more than 64 token rows");
  if (scratch == nullptr) throw std::invalid_argument("gemv_q8_mma: x is quantized into scratch, which is missing");
  auto* xq = static_cast<int8_t*>(scratch);
  auto* ds = reinterpret_cast<float2*>(xq + n * w.in);  // 8-byte aligned: n * in is a multiple of 32
  quantize_q8_rows(x, n, w.in, xq, ds, stream);
  if (w.format == wformat::q4_1) launch<wformat::q4_1>(w, xq, ds, y, n, accumulate, stream);
  else launch<wformat::q8_0>(w, xq, ds, y, n, accumulate, stream);
}

}  // namespace tandem::cuda
