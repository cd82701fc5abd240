// Decode linears with 8-bit activations: x is quantized to q8 blocks exactly as
// backend.cpu's quantize_q8 does (d = amax / 127, q = rint(x / d), s = d * sum q), and
// each weight block is dotted with dp4a (4 products per instruction), as backend.cpu's
// default linear computes it. Per Q4_1 block of 32 weights a lane issues 8 dp4a and a
// handful of bit operations, against ~100 float instructions for the f32 path, so the
// kernel can stream weights at close to the memory bandwidth.
//
// Inputs of in <= staged_max_in can be quantized by every block into shared memory (no
// extra launch; the default for one row, and where a prologue is applied); otherwise x is
// quantized once into global scratch by a quantize kernel first (kernels.hpp, q8_staging,
// says which is faster where). Staging is the block's
// critical path before its first dot product: 8 lanes quantize one 32-value block from
// four values each, and every warp requests 8 such blocks' values before reducing any, so
// 8 tokens of in = 1536 take 3 dependent rounds per block rather than 24.
// While a block stages x it can also apply the linear's prologue (the block's pre-norm,
// or the SiLU gate of the down projection) with the arithmetic of pointwise.cu's kernels,
// and its epilogue can add the result to y (the residual stream): one launch where the
// separate ops took two or three.
//
// Shapes: a warp owns R consecutive output rows and lane l reads blocks l, l + 32, ... of
// each (so a row's sum runs in the same order whatever R is), and dots each weight block it
// reads with the block of every token row: the weights are read once for all rows (up to
// gemv_q8_max_tokens = 32; 16- and 32-row kernels take any count up to theirs). Every block a lane needs is
// requested before the kernel waits for its predecessor when in <= 64 blocks (2048), the
// first 32 otherwise. Very tall matrices (the LM head) get 8 warps of 4 rows per block,
// so the x staging is paid once per 32 rows rather than per 8.
#include <atomic>
#include <stdexcept>

#include "common.cuh"
#include "norm_row.cuh"
#include "q8_stage.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

using detail::blocks_for;
using q8stage::quantize_quad;
using q8stage::stage_smem_bytes;
using q8stage::stage_x;

constexpr int64_t staged_max_in = 4096;
// Shared memory a staging block may take (x quantized, its scales, the norm's sums): 32
// rows of in = 576 take 27 KB, 16 of 1536 33 KB; the opt-in limit on sm_90 is 227 KB.
constexpr size_t stage_smem_max = 96 * 1024;
constexpr int64_t wide_min_out = 16384;  // matrices at least this tall use the wide shape

__device__ __forceinline__ int warp_sum_int(int v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
  return v;
}

// Quantizes block i (32 values, one per lane; v is this lane's) to xq[32 i + lane] and
// ds[i] = (d, d * sum q), as backend.cpu's quantize_q8.
__device__ __forceinline__ void quantize_block(float v, int64_t i, int lane, int8_t* xq, float2* ds) {
  const float amax = detail::warp_max(fabsf(v));
  const float d = __fdiv_rn(amax, 127.0f);
  const float id = d > 0.0f ? __frcp_rn(d) : 0.0f;
  const int q = max(-127, min(127, __float2int_rn(__fmul_rn(v, id))));
  xq[i * 32 + lane] = static_cast<int8_t>(q);
  const int sum = warp_sum_int(q);
  if (lane == 0) ds[i] = make_float2(d, __fmul_rn(d, static_cast<float>(sum)));
}

// Warp `warp` of `nwarps` quantizes blocks warp, warp + nwarps, ... of x [n, in] (block i
// is x[32 i .. 32 i + 31]); four blocks' loads are issued before any of their reductions.
__device__ void quantize_blocks(const float* __restrict__ x, int64_t n, int64_t in, int8_t* xq, float2* ds,
                                int64_t warp, int64_t nwarps, int lane) {
  const int64_t total = n * (in / 32);
  for (int64_t i0 = warp; i0 < total; i0 += 4 * nwarps) {
    float v[4];
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * nwarps;
      v[u] = i < total ? x[i * 32 + lane] : 0.0f;
    }
#pragma unroll
    for (int u = 0; u < 4; ++u) {
      const int64_t i = i0 + u * nwarps;
      if (i >= total) break;  // warp-uniform
      quantize_block(v[u], i, lane, xq, ds);
    }
  }
}

__global__ void quantize_kernel(const float* x, int64_t n, int64_t in, int8_t* xq, float2* ds) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int64_t nwarps = gridDim.x * int64_t{blockDim.x / 32};
  quantize_blocks(x, n, in, xq, ds, blockIdx.x * int64_t{blockDim.x / 32} + threadIdx.x / 32, nwarps, threadIdx.x & 31);
}

template <wformat F>
struct wblock {
  uint4 q0, q1;   // q4_1: q0 holds 32 nibbles; q8_0: q0, q1 hold 32 int8
  float d, m;
};

template <wformat F>
__device__ __forceinline__ wblock<F> load_wblock(const dev_matrix& w, int64_t row, int64_t b, int64_t nb) {
  wblock<F> r;
  const int64_t i = row * nb + b;
  if constexpr (F == wformat::q4_1) {
    r.q0 = __ldcs(static_cast<const uint4*>(w.qs) + i);  // read once: keep it out of the caches
    const __half2 dm = __ldcs(static_cast<const __half2*>(w.scales) + i);
    r.d = __low2float(dm), r.m = __high2float(dm);
  } else {
    const uint4* q = static_cast<const uint4*>(w.qs) + i * 2;
    r.q0 = __ldcs(q), r.q1 = __ldcs(q + 1);
    r.d = __half2float(__ldcs(static_cast<const __half*>(w.scales) + i)), r.m = 0.0f;
  }
  return r;
}

template <wformat F>
__device__ __forceinline__ int dot_block(const wblock<F>& wb, const int4& x0, const int4& x1) {
  if constexpr (F == wformat::q4_1) {
    // Byte j holds q[j] (low nibble) and q[j + 16] (high nibble).
    const uint32_t w[4] = {wb.q0.x, wb.q0.y, wb.q0.z, wb.q0.w};
    const int xl[4] = {x0.x, x0.y, x0.z, x0.w}, xh[4] = {x1.x, x1.y, x1.z, x1.w};
    int s = 0;
#pragma unroll
    for (int k = 0; k < 4; ++k) {
      s = __dp4a(static_cast<int>(w[k] & 0x0f0f0f0fu), xl[k], s);
      s = __dp4a(static_cast<int>((w[k] >> 4) & 0x0f0f0f0fu), xh[k], s);
    }
    return s;
  } else {
    const int w[8] = {static_cast<int>(wb.q0.x), static_cast<int>(wb.q0.y), static_cast<int>(wb.q0.z),
                      static_cast<int>(wb.q0.w), static_cast<int>(wb.q1.x), static_cast<int>(wb.q1.y),
                      static_cast<int>(wb.q1.z), static_cast<int>(wb.q1.w)};
    const int xs[8] = {x0.x, x0.y, x0.z, x0.w, x1.x, x1.y, x1.z, x1.w};
    int s = 0;
#pragma unroll
    for (int k = 0; k < 8; ++k) s = __dp4a(w[k], xs[k], s);
    return s;
  }
}

// acc[r][t] += block b of the warp's row r dotted with block b of token t's quantized x,
// for the n <= NT token rows there are and the first `valid` of the R rows.
template <wformat F, int NT, int R>
__device__ __forceinline__ void dot_step(const wblock<F> (&wb)[R], int64_t b, int n, int64_t in, int64_t nb,
                                         int valid, const int8_t* xq, const float2* ds, float (&acc)[R][NT]) {
#pragma unroll
  for (int t = 0; t < NT; ++t) {
    if (t >= n) break;  // uniform
    const int4* xp = reinterpret_cast<const int4*>(xq + t * in + b * 32);
    const int4 x0 = xp[0], x1 = xp[1];
    const float2 dx = ds[t * nb + b];
#pragma unroll
    for (int r = 0; r < R; ++r) {
      if (r < valid) {
        const float dot = static_cast<float>(dot_block<F>(wb[r], x0, x1));
        acc[r][t] += wb[r].d * dx.x * dot + wb[r].m * dx.y;
      }
    }
  }
}

// Block = NW warps x R rows. STAGED: x (f32) goes through the prologue and is quantized
// into shared memory first; else xq/ds are the global quantized activations (no
// prologue). KB: rounds of 32 weight blocks per lane requested before pdl_wait. The
// kernel of NT rows takes n = NT when NT <= 8 (the count is a constant there) and any
// n <= NT above.
// accumulate: y += the result (each output is read and written by one lane only).
// SWIGLU (R = 2, w a [gate; up] group of two halves): warp u's rows are gate row u and up
// row u (u + out / 2), and it writes y[t, u] = silu(gate) * up with silu_mul_kernel's
// arithmetic. A row's sum does not depend on which rows share its warp (lane l reads
// blocks l, l + 32, ... in order), so this is the separate linear and silu_mul bit for bit,
// without the second launch.
// NORM (one segment, no accumulate): y is the product, then the grid's last block runs
// add_rms_norm over every row (norm_row.cuh: add_rms_norm_last_block).
template <wformat F, int NT, bool STAGED, int NW, int R, int KB, bool SWIGLU = false, bool NORM = false>
__global__ void __launch_bounds__(NW * 32) gemv_q8_kernel(dev_matrix w, const float* __restrict__ x, dev_prologue pro,
                                                          const int8_t* __restrict__ gxq,
                                                          const float2* __restrict__ gds, float* __restrict__ y,
                                                          int n_rows, bool accumulate, dev_add_norm norm) {
  static_assert(!SWIGLU || R == 2, "a SwiGLU warp owns one gate row and one up row");
  static_assert(!(SWIGLU && NORM), "one epilogue");
  extern __shared__ __align__(16) unsigned char smem[];
  const int n = NT <= 8 ? NT : n_rows;
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  const int64_t nb = w.in / 32;
  const int64_t unit = blockIdx.x * int64_t{NW} + warp;  // SWIGLU: the output column
  const int64_t half = w.out / 2;
  const int64_t row0 = SWIGLU ? unit : unit * R;
  const int64_t step = SWIGLU ? half : 1;  // row r of the warp is row0 + r * step
  const int valid = SWIGLU ? (unit < half ? R : 0)
                          : row0 >= w.out ? 0 : w.out - row0 < R ? static_cast<int>(w.out - row0) : R;
  // The weight blocks are requested before the activations are staged, so their DRAM
  // latency overlaps that work (and the previous kernel's tail).
  wblock<F> wb[KB][R];
#pragma unroll
  for (int k = 0; k < KB; ++k)
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < valid && lane + 32 * k < nb) wb[k][r] = load_wblock<F>(w, row0 + r * step, lane + 32 * k, nb);
  detail::pdl_wait();  // x (and the scratch it was quantized into) come from earlier kernels
  detail::pdl_trigger();
  const int8_t* xq = gxq;
  const float2* ds = gds;
  if constexpr (STAGED) {
    auto* sq = reinterpret_cast<int8_t*>(smem);
    auto* sds = reinterpret_cast<float2*>(smem + n * w.in);
    auto* sred = reinterpret_cast<float*>(sds + n * nb);
    stage_x<NT, NW>(x, pro, n, static_cast<int>(w.in), sq, sds, sred, warp, lane);
    __syncthreads();
    xq = sq, ds = sds;
  }
  // A NORM warp past the last row stays for the epilogue's barriers: with valid == 0 every
  // load, dot and store below is skipped.
  if (valid == 0 && !NORM) return;
  float acc[R][NT];
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int t = 0; t < NT; ++t) acc[r][t] = 0.0f;
#pragma unroll
  for (int k = 0; k < KB; ++k)
    if (lane + 32 * k < nb) dot_step<F, NT, R>(wb[k], lane + 32 * k, n, w.in, nb, valid, xq, ds, acc);
  for (int64_t b = lane + 32 * KB; b < nb; b += 32) {
    wblock<F> cur[R];
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (r < valid) cur[r] = load_wblock<F>(w, row0 + r * step, b, nb);
    dot_step<F, NT, R>(cur, b, n, w.in, nb, valid, xq, ds, acc);
  }
  if constexpr (SWIGLU) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= n) break;  // uniform
      const float g = detail::warp_sum(acc[0][t]), u = detail::warp_sum(acc[1][t]);
      if (lane == 0) y[t * half + unit] = g / (1.0f + expf(-g)) * u;
    }
    return;
  }
#pragma unroll
  for (int r = 0; r < R; ++r) {
#pragma unroll
    for (int t = 0; t < NT; ++t) {
      if (t >= n) break;  // uniform
      const float s = detail::warp_sum(acc[r][t]);
      if (lane == 0 && r < valid) {
        float* o = detail::out_at(w, y, n, t, row0 + r);
        *o = accumulate ? *o + s : s;
      }
    }
  }
  if constexpr (NORM) detail::add_rms_norm_last_block(norm, y, n, w.out);
}

template <wformat F, int NT, bool STAGED, int NW, int R, int KB, bool SWIGLU = false, bool NORM = false>
void launch_shape(const dev_matrix& w, const float* x, int64_t n, const dev_prologue& pro, float* y,
                  bool accumulate, const int8_t* xq, const float2* ds, cudaStream_t s, const dev_add_norm& norm = {}) {
  const unsigned grid = SWIGLU ? blocks_for(w.out / 2, NW) : blocks_for(w.out, NW * R);
  const size_t smem = STAGED ? stage_smem_bytes(static_cast<int>(n), w.in) : 0;
  auto kernel = gemv_q8_kernel<F, NT, STAGED, NW, R, KB, SWIGLU, NORM>;
  // Past the default 48 KB a kernel must opt in, once per device (outside any graph
  // capture: a step's first, eager run gets here first).
  if (smem > 48 * 1024) {
    static std::atomic<uint64_t> opted{0};
    int dev = 0;
    cudaGetDevice(&dev);
    const uint64_t bit = uint64_t{1} << (dev & 63);
    if ((opted.load() & bit) == 0) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(stage_smem_max));
      opted.fetch_or(bit);
    }
  }
  detail::launch_pdl(kernel, dim3(grid), dim3(NW * 32), smem, s, w, x, pro, xq, ds, y, static_cast<int>(n),
                     accumulate, norm);
}

// Shapes: NT <= 8 as measured in sessions 2-5 (tall matrices: 8 warps of 4 rows; in of 33-64
// blocks: two rounds of weights requested up front); more rows keep 2 rows a warp (the
// accumulators are R x NT registers). NORM launches stage x as gemv_q8's automatic choice
// (stage_in_block: one row of a matrix under wide_min_out rows), so only those shapes exist.
template <wformat F, int NT, bool SWIGLU = false, bool NORM = false>
void launch_nt(const dev_matrix& w, const float* x, int64_t n, const dev_prologue& pro, float* y, bool accumulate,
               const int8_t* xq, const float2* ds, bool staged, cudaStream_t s, const dev_add_norm& norm = {}) {
  const int64_t nb = w.in / 32;
  const bool two_rounds = nb > 32 && nb <= 64;
  if (!staged) {
    if constexpr (NT > 8) {
      if (two_rounds) return launch_shape<F, NT, false, 4, 2, 2, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, s);
    }
    return launch_shape<F, NT, false, 4, 2, 1, SWIGLU, NORM>(w, x, n, pro, y, accumulate, xq, ds, s, norm);
  }
  if constexpr (NORM && NT > 1) {
    throw std::logic_error("gemv_q8_add_rms_norm: x is staged in the block for one row only");
  } else {
    if constexpr (NT <= 8 && !SWIGLU && !NORM) {
      if (w.out >= wide_min_out) return launch_shape<F, NT, true, 8, 4, 1>(w, x, n, pro, y, accumulate, xq, ds, s);
    }
    if (two_rounds) launch_shape<F, NT, true, 4, 2, 2, SWIGLU, NORM>(w, x, n, pro, y, accumulate, xq, ds, s, norm);
    else launch_shape<F, NT, true, 4, 2, 1, SWIGLU, NORM>(w, x, n, pro, y, accumulate, xq, ds, s, norm);
  }
}

template <wformat F, bool SWIGLU = false>
void launch(const dev_matrix& w, const float* x, int64_t n, const dev_prologue& pro, float* y, bool accumulate,
            const int8_t* xq, const float2* ds, bool staged, cudaStream_t s) {
  switch (n) {
    case 1: launch_nt<F, 1, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    case 2: launch_nt<F, 2, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    case 3: launch_nt<F, 3, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    case 4: launch_nt<F, 4, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    case 5: launch_nt<F, 5, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    case 6: launch_nt<F, 6, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    case 7: launch_nt<F, 7, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    case 8: launch_nt<F, 8, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s); break;
    default:
      if (n <= 16) launch_nt<F, 16, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s);
      else launch_nt<F, 32, SWIGLU>(w, x, n, pro, y, accumulate, xq, ds, staged, s);
  }
}

// x staged per block for one row (as gemv_q8_fused's automatic choice), else quantized
// once into scratch.
bool stage_in_block(const dev_matrix& w, int64_t n) { return n == 1 && w.out < wide_min_out && gemv_q8_stageable(w, n); }

template <wformat F>
void launch_norm(const dev_matrix& w, const float* x, int64_t n, float* y, const int8_t* xq, const float2* ds,
                 bool staged, const dev_add_norm& norm, cudaStream_t s) {
  switch (n) {
    case 1: launch_nt<F, 1, false, true>(w, x, n, dev_prologue{}, y, false, xq, ds, staged, s, norm); break;
    case 2: launch_nt<F, 2, false, true>(w, x, n, dev_prologue{}, y, false, xq, ds, staged, s, norm); break;
    case 3: launch_nt<F, 3, false, true>(w, x, n, dev_prologue{}, y, false, xq, ds, staged, s, norm); break;
    default: launch_nt<F, 4, false, true>(w, x, n, dev_prologue{}, y, false, xq, ds, staged, s, norm); break;
  }
}

}  // namespace

bool gemv_q8_supported(const dev_matrix& w) {
  return (w.format == wformat::q4_1 || w.format == wformat::q8_0) && w.in % 32 == 0;
}

bool gemv_q8_stageable(const dev_matrix& w, int64_t n) {
  return gemv_q8_supported(w) && n >= 1 && n <= gemv_q8_max_tokens && w.in <= staged_max_in &&
         stage_smem_bytes(static_cast<int>(n), w.in) <= stage_smem_max;
}

size_t gemv_q8_scratch_bytes(int64_t n, int64_t in) {
  return static_cast<size_t>(n * in) + static_cast<size_t>(n * (in / 32)) * sizeof(float2);
}

void quantize_q8_rows(const float* x, int64_t n, int64_t in, int8_t* xq, float2* ds, cudaStream_t stream) {
  const int64_t blocks = n * (in / 32);
  if (blocks == 0) return;
  detail::launch_pdl(quantize_kernel, dim3(static_cast<unsigned>(std::min<int64_t>(blocks_for(blocks, 8), 1024))),
                     dim3(256), 0, stream, x, n, in, xq, ds);
}

void gemv_q8_fused(const dev_matrix& w, const float* x, int64_t n, const dev_prologue& pro, bool accumulate, float* y,
                   void* scratch, cudaStream_t stream, q8_staging staging) {
  if (n == 0 || w.out == 0) return;
  if (n < 0 || n > gemv_q8_max_tokens) throw std::invalid_argument("gemv_q8: more than 32 token rows");
  if (staging == q8_staging::automatic)  // see q8_staging in kernels.hpp for the measurements
    staging = pro.kind != dev_prologue::none || stage_in_block(w, n) ? q8_staging::in_block : q8_staging::global;
  const bool staged = staging == q8_staging::in_block;
  if (staged && !gemv_q8_stageable(w, n))
    throw std::invalid_argument(pro.kind != dev_prologue::none
                                    ? "gemv_q8: a prologue needs x staged in shared memory (in <= 4096, rows within "
                                      "the shared-memory budget: gemv_q8_stageable)"
                                    : "gemv_q8: x does not fit the block's shared memory (in <= 4096, rows within the "
                                      "budget)");
  if (!staged && pro.kind != dev_prologue::none)
    throw std::invalid_argument("gemv_q8: a prologue needs x staged in shared memory");
  int8_t* xq = nullptr;
  float2* ds = nullptr;
  if (!staged) {
    if (scratch == nullptr) throw std::invalid_argument("gemv_q8: x quantized into global scratch needs scratch");
    xq = static_cast<int8_t*>(scratch);
    // The block scales follow the quants, 8-byte aligned (n * in is a multiple of 32).
    ds = reinterpret_cast<float2*>(xq + n * w.in);
    quantize_q8_rows(x, n, w.in, xq, ds, stream);
  }
  if (w.format == wformat::q4_1) launch<wformat::q4_1>(w, x, n, pro, y, accumulate, xq, ds, staged, stream);
  else launch<wformat::q8_0>(w, x, n, pro, y, accumulate, xq, ds, staged, stream);
}

void gemv_q8(const dev_matrix& w, const float* x, int64_t n, float* y, void* scratch, cudaStream_t stream) {
  gemv_q8_fused(w, x, n, dev_prologue{}, false, y, scratch, stream);
}

bool swiglu_shaped(const dev_matrix& w) {
  return w.n_segs == 2 && w.seg[1] * 2 == w.out && w.out > 0;
}

void gemv_q8_swiglu(const dev_matrix& w, const float* x, int64_t n, float* y, void* scratch, cudaStream_t stream) {
  if (n == 0) return;
  if (n < 0 || n > gemv_q8_max_tokens) throw std::invalid_argument("gemv_q8_swiglu: more than 32 token rows");
  if (!gemv_q8_supported(w) || !swiglu_shaped(w))
    throw std::invalid_argument("gemv_q8_swiglu: q4_1 / q8_0 [gate; up] group of two equal parts only");
  const bool staged = stage_in_block(w, n);
  int8_t* xq = nullptr;
  float2* ds = nullptr;
  if (!staged) {
    if (scratch == nullptr) throw std::invalid_argument("gemv_q8_swiglu: x quantized into global scratch needs scratch");
    xq = static_cast<int8_t*>(scratch);
    ds = reinterpret_cast<float2*>(xq + n * w.in);
    quantize_q8_rows(x, n, w.in, xq, ds, stream);
  }
  if (w.format == wformat::q4_1) launch<wformat::q4_1, true>(w, x, n, dev_prologue{}, y, false, xq, ds, staged, stream);
  else launch<wformat::q8_0, true>(w, x, n, dev_prologue{}, y, false, xq, ds, staged, stream);
}

bool gemv_q8_add_rms_norm_supported(const dev_matrix& w, int64_t n) {
  return gemv_q8_supported(w) && w.n_segs == 1 && w.out > 0 && n >= 1 && n <= gemv_q8_norm_max_tokens;
}

void gemv_q8_add_rms_norm(const dev_matrix& w, const float* x, int64_t n, float* y, const dev_add_norm& norm,
                          void* scratch, cudaStream_t stream) {
  if (!gemv_q8_add_rms_norm_supported(w, n))
    throw std::invalid_argument("gemv_q8_add_rms_norm: q4_1 / q8_0 of one segment and 1 to 4 token rows only");
  if (norm.ticket == nullptr || norm.residual == nullptr || norm.weight == nullptr || norm.out == nullptr)
    throw std::invalid_argument("gemv_q8_add_rms_norm: residual, weight, out and the ticket are needed");
  // x staged as gemv_q8's automatic choice, so the product is linear()'s (it is the same
  // either way: both stagings give the same bytes).
  const bool staged = stage_in_block(w, n);
  int8_t* xq = nullptr;
  float2* ds = nullptr;
  if (!staged) {
    if (scratch == nullptr) throw std::invalid_argument("gemv_q8_add_rms_norm: x quantized into global scratch needs scratch");
    xq = static_cast<int8_t*>(scratch);
    ds = reinterpret_cast<float2*>(xq + n * w.in);
    quantize_q8_rows(x, n, w.in, xq, ds, stream);
  }
  if (w.format == wformat::q4_1) launch_norm<wformat::q4_1>(w, x, n, y, xq, ds, staged, norm, stream);
  else launch_norm<wformat::q8_0>(w, x, n, y, xq, ds, staged, norm, stream);
}

}  // namespace tandem::cuda
