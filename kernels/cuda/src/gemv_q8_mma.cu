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
// Work: a block of 8 warps owns RT tiles of 16 output rows, KS = 8 / RT warps per tile:
// warp k of a tile takes weight blocks k, k + KS, ... of its rows (in order); with KS > 1
// the warps' partial sums go through shared memory and are added in warp order. RT and KS
// depend on the matrix's height only (tall matrices: 8 tiles a block, one warp each; the
// rest: one tile, 8 warps), so a (row, token) output is summed in an order fixed by the
// matrix alone: the same bits whatever the other token rows are, and whether the launch
// has 1 or 64 of them.
//
// x is quantized either by every block into its shared memory (in-block staging, with
// the linear's prologue applied on the way: q8_stage.cuh, the q8 GEMV's code; one launch)
// or once into global scratch by the quantize kernel (more than 32 rows, or in > 4096);
// both give the same bytes, so the output does not depend on the staging either.
#include <atomic>
#include <stdexcept>

#include "common.cuh"
#include "norm_row.cuh"
#include "q8_stage.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

constexpr int tile_rows = 16;
constexpr int chunk_blocks = 4;  // weight blocks a warp requests before it computes any
constexpr int block_warps = 8;
constexpr int64_t tall_tiles = 1024;        // from 16384 rows: 8 tiles a block, one warp each
constexpr int staged_max_tokens = 32;       // in-block staging's register budget (stage_x's 1 / rms)
constexpr int64_t staged_max_in = 4096;
constexpr size_t smem_max = 160 * 1024;     // opt-in budget of a staging block (sm_90: 227 KB)

// Shared memory of a block: the cross-warp sums (KS > 1), then the staged x.
constexpr size_t red_bytes(int ntile, int rt) { return rt == 1 ? size_t{block_warps} * ntile * 8 * (tile_rows + 1) * 4 : 0; }

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

// SWIGLU (w a [gate; up] group of two halves): a tile's rows g are gate rows j0 + g and its
// rows g + 8 the up rows of the same outputs (j0 + g + out / 2), so the lane holding a gate
// sum also holds its up sum, and y[t, j] = silu(gate) * up is written with silu_mul_kernel's
// arithmetic. Each row's sum is made as in the plain kernel (the same fragments and warp
// order; RT and KS come from the matrix's height either way): the separate linear and
// silu_mul bit for bit, in one launch.
// NORM (one segment, no accumulate): y is the product, then the grid's last block runs
// add_rms_norm over every row (norm_row.cuh: add_rms_norm_last_block), as in the q8 GEMV.
template <wformat F, int NTILE, int RT, bool STAGED, bool SWIGLU = false, bool NORM = false>
__global__ void __launch_bounds__(block_warps * 32) gemv_q8_mma_kernel(dev_matrix w, const float* __restrict__ x,
                                                                       dev_prologue pro,
                                                                       const int8_t* __restrict__ gxq,
                                                                       const float2* __restrict__ gds,
                                                                       float* __restrict__ y, int n, bool accumulate,
                                                                       dev_add_norm norm) {
  static_assert(!(SWIGLU && NORM), "one epilogue");
  constexpr int KS = block_warps / RT;
  extern __shared__ __align__(16) unsigned char smem[];
  auto* red = reinterpret_cast<float*>(smem);  // [block_warps][NTILE * 8][tile_rows + 1] when KS > 1
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, q = lane & 3;
  const int rt = warp % RT, ks = warp / RT;
  const int64_t tile = int64_t{blockIdx.x} * RT + rt, half = w.out / 2;
  const int64_t nb = w.in / 32, row0 = SWIGLU ? tile * (tile_rows / 2) : tile * tile_rows;
  const int64_t r0 = row0 + g, r1 = SWIGLU ? half + row0 + g : row0 + g + 8;
  const bool v0 = SWIGLU ? r0 < half : r0 < w.out, v1 = SWIGLU ? v0 : r1 < w.out;

  float acc[NTILE][4];
#pragma unroll
  for (int j = 0; j < NTILE; ++j) acc[j][0] = acc[j][1] = acc[j][2] = acc[j][3] = 0.0f;

  // The first chunk of weights is requested before waiting for x's producer, so its DRAM
  // latency overlaps that kernel's tail and this block's staging.
  afrag f[chunk_blocks];
#pragma unroll
  for (int c = 0; c < chunk_blocks; ++c) {
    const int64_t b = ks + int64_t{KS} * c;
    if (b < nb) f[c] = load_afrag<F>(w, r0, v0, r1, v1, b, nb, q);
  }
  detail::pdl_wait();
  detail::pdl_trigger();
  const int8_t* xq = gxq;
  const float2* ds = gds;
  if constexpr (STAGED) {
    auto* sq = reinterpret_cast<int8_t*>(smem + red_bytes(NTILE, RT));
    auto* sds = reinterpret_cast<float2*>(sq + n * w.in);  // n * in is a multiple of 32
    auto* sred = reinterpret_cast<float*>(sds + n * nb);
    q8stage::stage_x<NTILE * 8, block_warps>(x, pro, n, static_cast<int>(w.in), sq, sds, sred, warp, lane);
    __syncthreads();
    xq = sq, ds = sds;
  }
  for (int64_t b0 = ks; b0 < nb; b0 += int64_t{KS} * chunk_blocks) {
    if (b0 != ks) {
#pragma unroll
      for (int c = 0; c < chunk_blocks; ++c) {
        const int64_t b = b0 + int64_t{KS} * c;
        if (b < nb) f[c] = load_afrag<F>(w, r0, v0, r1, v1, b, nb, q);
      }
    }
#pragma unroll
    for (int c = 0; c < chunk_blocks; ++c) {
      const int64_t b = b0 + int64_t{KS} * c;
      if (b < nb) block_terms<NTILE>(f[c], b, nb, w.in, n, xq, ds, g, q, acc);
    }
  }
  auto put = [&](int t, int64_t row, float s) {
    float* o = detail::out_at(w, y, n, t, row);
    *o = accumulate ? *o + s : s;
  };
  auto put_gated = [&](int t, int64_t j, float gate, float up) { y[t * half + j] = gate / (1.0f + expf(-gate)) * up; };
  if constexpr (SWIGLU && KS == 1) {
#pragma unroll
    for (int j = 0; j < NTILE; ++j) {
      const int t0 = 8 * j + 2 * q, t1 = t0 + 1;
      if (v0 && t0 < n) put_gated(t0, r0, acc[j][0], acc[j][2]);
      if (v0 && t1 < n) put_gated(t1, r0, acc[j][1], acc[j][3]);
    }
  } else if constexpr (KS == 1) {  // the warp has whole rows: straight from the fragments
#pragma unroll
    for (int j = 0; j < NTILE; ++j) {
      const int t0 = 8 * j + 2 * q, t1 = t0 + 1;
      if (v0 && t0 < n) put(t0, r0, acc[j][0]);
      if (v0 && t1 < n) put(t1, r0, acc[j][1]);
      if (v1 && t0 < n) put(t0, r1, acc[j][2]);
      if (v1 && t1 < n) put(t1, r1, acc[j][3]);
    }
  } else {
    constexpr int T = NTILE * 8, P = tile_rows + 1;
#pragma unroll
    for (int j = 0; j < NTILE; ++j) {
      const int t0 = 8 * j + 2 * q;
      red[(warp * T + t0) * P + g] = acc[j][0];
      red[(warp * T + t0 + 1) * P + g] = acc[j][1];
      red[(warp * T + t0) * P + g + 8] = acc[j][2];
      red[(warp * T + t0 + 1) * P + g + 8] = acc[j][3];
    }
    __syncthreads();
    if constexpr (SWIGLU) {
      constexpr int H = tile_rows / 2;
      for (int i = threadIdx.x; i < n * H; i += block_warps * 32) {
        const int t = i / H, r = i % H;
        if (row0 + r >= half) continue;
        float sg = red[t * P + r], su = red[t * P + r + H];
#pragma unroll
        for (int k = 1; k < KS; ++k) sg += red[(k * T + t) * P + r], su += red[(k * T + t) * P + r + H];
        put_gated(t, row0 + r, sg, su);
      }
    } else {
      for (int i = threadIdx.x; i < n * tile_rows; i += block_warps * 32) {
        const int t = i / tile_rows, r = i % tile_rows;
        const int64_t row = row0 + r;
        if (row >= w.out) continue;
        float s = red[t * P + r];
#pragma unroll
        for (int k = 1; k < KS; ++k) s += red[(k * T + t) * P + r];
        put(t, row, s);
      }
    }
  }
  if constexpr (NORM) detail::add_rms_norm_last_block(norm, y, n, w.out);
}

size_t smem_bytes(int ntile, int rt, bool staged, int64_t n, int64_t in) {
  return red_bytes(ntile, rt) + (staged ? q8stage::stage_smem_bytes(static_cast<int>(n), in) : 0);
}

template <wformat F, int NTILE, int RT, bool STAGED, bool SWIGLU, bool NORM = false>
void launch_shape(const dev_matrix& w, const float* x, const dev_prologue& pro, const int8_t* xq, const float2* ds,
                  float* y, int64_t n, bool accumulate, cudaStream_t s, const dev_add_norm& norm = {}) {
  const int64_t tiles = (w.out + tile_rows - 1) / tile_rows;
  const unsigned grid = static_cast<unsigned>((tiles + RT - 1) / RT);
  const size_t smem = smem_bytes(NTILE, RT, STAGED, n, w.in);
  auto kernel = gemv_q8_mma_kernel<F, NTILE, RT, STAGED, SWIGLU, NORM>;
  // Past the default 48 KB a kernel must opt in, once per device (outside any graph
  // capture: a step's first, eager run gets here first).
  if (smem > 48 * 1024) {
    static std::atomic<uint64_t> opted{0};
    int dev = 0;
    cudaGetDevice(&dev);
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if ((opted.load() & bit) == 0) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem_max));
      opted.fetch_or(bit);
    }
  }
  detail::launch_pdl(kernel, dim3(grid), dim3(block_warps * 32), smem, s, w, x, pro, xq, ds, y, static_cast<int>(n),
                     accumulate, norm);
}

template <wformat F, int NTILE, bool STAGED, bool SWIGLU, bool NORM = false>
void launch_rt(const dev_matrix& w, const float* x, const dev_prologue& pro, const int8_t* xq, const float2* ds,
               float* y, int64_t n, bool accumulate, cudaStream_t s, const dev_add_norm& norm = {}) {
  if ((w.out + tile_rows - 1) / tile_rows >= tall_tiles)
    launch_shape<F, NTILE, block_warps, STAGED, SWIGLU, NORM>(w, x, pro, xq, ds, y, n, accumulate, s, norm);
  else
    launch_shape<F, NTILE, 1, STAGED, SWIGLU, NORM>(w, x, pro, xq, ds, y, n, accumulate, s, norm);
}

template <wformat F, bool SWIGLU = false>
void launch(const dev_matrix& w, const float* x, const dev_prologue& pro, const int8_t* xq, const float2* ds,
            float* y, int64_t n, bool accumulate, bool staged, cudaStream_t s) {
  if (staged) {  // n <= staged_max_tokens
    if (n <= 8) launch_rt<F, 1, true, SWIGLU>(w, x, pro, xq, ds, y, n, accumulate, s);
    else if (n <= 16) launch_rt<F, 2, true, SWIGLU>(w, x, pro, xq, ds, y, n, accumulate, s);
    else launch_rt<F, 4, true, SWIGLU>(w, x, pro, xq, ds, y, n, accumulate, s);
    return;
  }
  if (n <= 8) launch_rt<F, 1, false, SWIGLU>(w, x, pro, xq, ds, y, n, accumulate, s);
  else if (n <= 16) launch_rt<F, 2, false, SWIGLU>(w, x, pro, xq, ds, y, n, accumulate, s);
  else if (n <= 32) launch_rt<F, 4, false, SWIGLU>(w, x, pro, xq, ds, y, n, accumulate, s);
  else launch_rt<F, 8, false, SWIGLU>(w, x, pro, xq, ds, y, n, accumulate, s);
}

int ntile_of(int64_t n) { return n <= 8 ? 1 : n <= 16 ? 2 : n <= 32 ? 4 : 8; }

template <wformat F>
void launch_norm(const dev_matrix& w, const float* x, const int8_t* xq, const float2* ds, float* y, int64_t n,
                 bool staged, const dev_add_norm& norm, cudaStream_t s) {
  if (staged) {
    if (n <= 8) launch_rt<F, 1, true, false, true>(w, x, dev_prologue{}, xq, ds, y, n, false, s, norm);
    else launch_rt<F, 2, true, false, true>(w, x, dev_prologue{}, xq, ds, y, n, false, s, norm);
  } else {
    if (n <= 8) launch_rt<F, 1, false, false, true>(w, x, dev_prologue{}, xq, ds, y, n, false, s, norm);
    else launch_rt<F, 2, false, false, true>(w, x, dev_prologue{}, xq, ds, y, n, false, s, norm);
  }
}

}  // namespace

bool gemv_q8_mma_stageable(const dev_matrix& w, int64_t n) {
  if (!gemv_q8_supported(w) || n < 1 || n > staged_max_tokens || w.in > staged_max_in) return false;
  const int rt = (w.out + tile_rows - 1) / tile_rows >= tall_tiles ? block_warps : 1;
  return smem_bytes(ntile_of(n), rt, true, n, w.in) <= smem_max;
}

void gemv_q8_mma(const dev_matrix& w, const float* x, int64_t n, const dev_prologue& pro, bool accumulate, float* y,
                 void* scratch, cudaStream_t stream, q8_staging staging) {
  if (n == 0 || w.out == 0) return;
  if (!gemv_q8_supported(w)) throw std::invalid_argument("gemv_q8_mma: q4_1 or q8_0 weights with in % 32 == 0 only");
  if (n < 0 || n > gemv_q8_mma_max_tokens) throw std::invalid_argument("gemv_q8_mma: more than 64 token rows");
  if (staging == q8_staging::automatic) {
    // In-block staging quantizes x again in every block: it pays where the blocks are few
    // and the rows few, and a prologue needs it. H200 (bench_cuda_kernels' linear curve,
    // 2026-12-05): at 8 rows it is faster for 576- and 960-row matrices (3.7 against 4.4 us)
    // and slower from 3072 rows (gate/up 5.3 against 5.2 us, the LM head 25.3 against 19.5);
    // at 16 rows slower everywhere (down 14.2 against 8.6 us).
    const bool few = n <= 8 && w.out < 2048;
    staging = gemv_q8_mma_stageable(w, n) && (few || pro.kind != dev_prologue::none) ? q8_staging::in_block
                                                                                       : q8_staging::global;
  }
  const bool staged = staging == q8_staging::in_block;
  if (staged && !gemv_q8_mma_stageable(w, n))
    throw std::invalid_argument("gemv_q8_mma: x does not fit a block's shared memory (at most 32 rows, in <= 4096: "
                                "gemv_q8_mma_stageable)");
  if (!staged && pro.kind != dev_prologue::none)
    throw std::invalid_argument("gemv_q8_mma: a prologue needs x staged in shared memory (gemv_q8_mma_stageable)");
  int8_t* xq = nullptr;
  float2* ds = nullptr;
  if (!staged) {
    if (scratch == nullptr) throw std::invalid_argument("gemv_q8_mma: x quantized into global scratch needs scratch");
    xq = static_cast<int8_t*>(scratch);
    ds = reinterpret_cast<float2*>(xq + n * w.in);  // 8-byte aligned: n * in is a multiple of 32
    quantize_q8_rows(x, n, w.in, xq, ds, stream);
  }
  if (w.format == wformat::q4_1) launch<wformat::q4_1>(w, x, pro, xq, ds, y, n, accumulate, staged, stream);
  else launch<wformat::q8_0>(w, x, pro, xq, ds, y, n, accumulate, staged, stream);
}

void gemv_q8_mma_swiglu(const dev_matrix& w, const float* x, int64_t n, float* y, void* scratch, cudaStream_t stream) {
  if (n == 0) return;
  if (!gemv_q8_supported(w) || !swiglu_shaped(w))
    throw std::invalid_argument("gemv_q8_mma_swiglu: q4_1 / q8_0 [gate; up] group of two equal parts only");
  if (n < 0 || n > gemv_q8_mma_max_tokens) throw std::invalid_argument("gemv_q8_mma_swiglu: more than 64 token rows");
  // The plain kernel's staging rule (gemv_q8_mma): both stagings give the same bytes.
  const bool staged = gemv_q8_mma_stageable(w, n) && n <= 8 && w.out < 2048;
  int8_t* xq = nullptr;
  float2* ds = nullptr;
  if (!staged) {
    if (scratch == nullptr) throw std::invalid_argument("gemv_q8_mma_swiglu: x quantized into global scratch needs scratch");
    xq = static_cast<int8_t*>(scratch);
    ds = reinterpret_cast<float2*>(xq + n * w.in);
    quantize_q8_rows(x, n, w.in, xq, ds, stream);
  }
  if (w.format == wformat::q4_1) launch<wformat::q4_1, true>(w, x, dev_prologue{}, xq, ds, y, n, false, staged, stream);
  else launch<wformat::q8_0, true>(w, x, dev_prologue{}, xq, ds, y, n, false, staged, stream);
}

bool gemv_q8_mma_add_rms_norm_supported(const dev_matrix& w, int64_t n) {
  return gemv_q8_supported(w) && w.n_segs == 1 && w.out > 0 && n >= 1 && n <= gemv_q8_mma_norm_max_tokens;
}

void gemv_q8_mma_add_rms_norm(const dev_matrix& w, const float* x, int64_t n, float* y, const dev_add_norm& norm,
                              void* scratch, cudaStream_t stream) {
  if (!gemv_q8_mma_add_rms_norm_supported(w, n))
    throw std::invalid_argument("gemv_q8_mma_add_rms_norm: q4_1 / q8_0 of one segment and 1 to 16 token rows only");
  if (norm.ticket == nullptr || norm.residual == nullptr || norm.weight == nullptr || norm.out == nullptr)
    throw std::invalid_argument("gemv_q8_mma_add_rms_norm: residual, weight, out and the ticket are needed");
  // The plain kernel's staging rule (gemv_q8_mma): both stagings give the same bytes.
  const bool staged = gemv_q8_mma_stageable(w, n) && n <= 8 && w.out < 2048;
  int8_t* xq = nullptr;
  float2* ds = nullptr;
  if (!staged) {
    if (scratch == nullptr)
      throw std::invalid_argument("gemv_q8_mma_add_rms_norm: x quantized into global scratch needs scratch");
    xq = static_cast<int8_t*>(scratch);
    ds = reinterpret_cast<float2*>(xq + n * w.in);
    quantize_q8_rows(x, n, w.in, xq, ds, stream);
  }
  if (w.format == wformat::q4_1) launch_norm<wformat::q4_1>(w, x, xq, ds, y, n, staged, norm, stream);
  else launch_norm<wformat::q8_0>(w, x, xq, ds, y, n, staged, norm, stream);
}

}  // namespace tandem::cuda
