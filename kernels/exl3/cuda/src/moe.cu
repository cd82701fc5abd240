// The EXL3 mixture-of-experts MLP (tandem_exl3_cuda/exl3_moe.hpp): route, input, gate+up,
// down, combine; and the per-expert loop baseline.
//
// The gate+up and down launches (mlp_kernel)
//  - Work unit = (chunk of <= 64 rows of one expert, column tile, k split). Gate+up: the
//    tile is 128 output columns of gate AND the same 128 of up (so the epilogue has whole
//    Hadamard chunks of both, and g and u of the same element): "stream" 0 = gate, 1 = up,
//    each with its own rotated input. Down: 256 columns, stream 0 = the first 128, stream 1
//    = the next 128 (absent in a last half tile when hidden % 256 == 128), one input.
//  - A CTA is 8 warps; warp w owns 16-column tile w of both streams for all rows of the
//    chunk: per 16-deep k step it decodes 2 trellis tiles straight into B fragments
//    (decode.cuh) and runs 2 x 2 m16n8k16 per active 16-row block (A fragments by ldmatrix
//    from the staged rows); accumulators: 2 streams x 4 row blocks x 16 columns = 64 f32 per
//    lane. The warps split the columns, not the rows, so each decoded tile has exactly one
//    consumer and never goes through shared memory: the same code is the fused decode-GEMV
//    for a 1-token chunk (1 row block: the decode dominates, 4 mma per k step and warp) and
//    the prefill GEMM for a full chunk (4 row blocks: 16 mma per the same decode, the rows
//    shared by the 8 warps through shared memory). The only branch between the two regimes
//    is the k split below.
//  - Stages of 64 k (4 trellis bands): the chunk's rows of the input(s) (64 rows x 64
//    halves in rows of 144 bytes: conflict-free ldmatrix) and the 2 x 8 tiles of each band,
//    by 16-byte cp.async, D - 1 stages in flight (D = 2..8 from the shared memory per SM:
//    on the H200 two CTAs per SM, D = 4 for gate+up and 6 for down at K = 4). Rows past the
//    chunk's count are zero-filled; 16-row blocks past it are skipped.
//  - Persistent grid (the resident CTA count), units taken from an atomic ticket in unit
//    order = chunk-major (the 16 or 24 column tiles of a chunk run side by side and share
//    its rows in L2; an expert's chunks are adjacent, so its trellis is read from DRAM about
//    once).
//  - k split: the route kernel picks KS (1..8) per launch. KS > 1 only when every chunk has
//    <= 16 rows and there are fewer (chunk, tile) items than resident CTAs (decode); then
//    the KS that best fills whole waves of resident CTAs (GLM-5 shapes, 1 token, H200:
//    gate+up 128 items x 2 and down 192 items x 4 against 264 resident CTAs; from 8 tokens
//    on there are enough items and KS = 1). Each split writes its f32 partial (16 x 256) to
//    its own slot; the last of the KS CTAs of an item (atomic counter, fenced) sums the KS
//    partials in split order (deterministic) and runs the epilogue.
//  - Epilogue per 16-row block through shared memory ([2][16][132] f32): one warp per row
//    and stream does the 128-point Hadamard (hadamard.cu's butterflies, same rounding).
//
// Cost model (not measured; H200, K = 4 MUL1, ~40 instructions to decode a tile):
//  - decode (1 token per chunk): ~116 warp-instructions per k step and warp (2 tile
//    decodes, 2 ldmatrix, 4 mma, the copies) for 2 x 256 weights: GLM-5 gate+up for one
//    token (8 experts, 201 M weights) ~50 us of issue over 132 SMs, down ~25 us: decode-
//    bound like exl3_gemv, its trellis (151 MB) would stream in ~35 us;
//  - prefill (64-row chunks): ~120 warp-instructions per k step and warp for 16 mma; per SM
//    4 warps per scheduler keep the tensor pipe ~80% busy: 4096 tokens ~4 ms gate+up and
//    ~2 ms down.
#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>
#include <vector>

#include "hadamard.cuh"
#include "tandem_cuda/block_scan.cuh"
#include "tandem_exl3_cuda/exl3_moe.hpp"

namespace tandem::exl3::cuda {
namespace {

using ::tandem::cuda::block_exclusive_scan;

constexpr int threads = 256;       // 8 warps per CTA
constexpr int MR = 64;             // rows per chunk
constexpr int KC = 64;             // k per stage (4 bands of 16)
constexpr int AST = KC + 8;        // halves per staged row (144 bytes)
constexpr int A_BYTES = MR * AST * 2;
constexpr int EST = 128 + 4;       // floats per epilogue row
constexpr int EPI_BYTES = 2 * 16 * EST * 4;
constexpr int split_rows = 16;     // rows of a partial (k split only when every chunk fits)
constexpr int part_floats = split_rows * 256;
constexpr int unit_cap = 1024;     // partial slots
constexpr int item_cap = 1024;     // fix-up counters per launch
constexpr int max_ks = 8;
constexpr int max_e = static_cast<int>(exl3_moe_max_experts);
using detail::butterflies;  // hadamard.cuh
using detail::had_scale;
using detail::mma16816;
static_assert(MR == exl3_moe_chunk_rows);

// What the route kernel decides (device memory, read by the later launches).
struct plan_hdr {
  int nvalid, nchunks, active, max_rows;
  int ks[2], items[2], units[2], ticket[2];
  int pad[4];
};
static_assert(sizeof(plan_hdr) == 64);

struct ws_ptrs {
  plan_hdr* plan;
  int* counts;     // [E]
  int* offsets;    // [E + 1]
  int4* chunks;    // [cmax]: expert, first slot, rows
  int* slot_tok;   // [P]
  int* slot_exp;   // [P]
  int* pair_slot;  // [P]: -1 for a skipped pair
  int* fix;        // [2][item_cap]
  float* part;     // [unit_cap][16][256]
  __half* xg;      // [P][hidden]: rotated gate input per slot
  __half* xu;      // [P][hidden]: rotated up input
  __half* hh;      // [P][width]: rotated down input
  __half* dout;    // [P][hidden]: down output (fp16 values)
};

size_t align256(size_t b) { return (b + 255) / 256 * 256; }

struct ws_layout {
  size_t off[13] = {};
  size_t total = 0;
  ws_layout(const exl3_moe_shape& s, int64_t P) {
    const auto E = static_cast<size_t>(s.experts), p = static_cast<size_t>(P);
    const size_t cmax = std::min(E, p) + p / MR + 1;
    const size_t sizes[13] = {sizeof(plan_hdr),
                              E * 4,
                              (E + 1) * 4,
                              cmax * 16,
                              p * 4,
                              p * 4,
                              p * 4,
                              2 * item_cap * 4,
                              static_cast<size_t>(unit_cap) * part_floats * 4,
                              p * static_cast<size_t>(s.hidden) * 2,
                              p * static_cast<size_t>(s.hidden) * 2,
                              p * static_cast<size_t>(s.width) * 2,
                              p * static_cast<size_t>(s.hidden) * 2};
    for (int i = 0; i < 13; ++i) off[i] = total, total += align256(sizes[i]);
  }
  ws_ptrs carve(void* base) const {
    auto* b = static_cast<uint8_t*>(base);
    return {reinterpret_cast<plan_hdr*>(b + off[0]), reinterpret_cast<int*>(b + off[1]),
            reinterpret_cast<int*>(b + off[2]),      reinterpret_cast<int4*>(b + off[3]),
            reinterpret_cast<int*>(b + off[4]),      reinterpret_cast<int*>(b + off[5]),
            reinterpret_cast<int*>(b + off[6]),      reinterpret_cast<int*>(b + off[7]),
            reinterpret_cast<float*>(b + off[8]),    reinterpret_cast<__half*>(b + off[9]),
            reinterpret_cast<__half*>(b + off[10]),  reinterpret_cast<__half*>(b + off[11]),
            reinterpret_cast<__half*>(b + off[12])};
  }
};

// ---------------------------------------------------------------------------------------
// Device helpers.

__device__ __forceinline__ void cp_async_cg(uint32_t dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(dst), "l"(src) : "memory");
}
// 16 bytes from src, or zeros when src_bytes == 0 (src must still be a valid address).
__device__ __forceinline__ void cp_async_zfill(uint32_t dst, const void* src, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(src_bytes) : "memory");
}
__device__ __forceinline__ void cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void cp_wait() {
  asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory");
}
// At most n (0..6) groups still pending.
__device__ __forceinline__ void cp_wait_dyn(int n) {
  switch (n) {
    case 0: cp_wait<0>(); break;
    case 1: cp_wait<1>(); break;
    case 2: cp_wait<2>(); break;
    case 3: cp_wait<3>(); break;
    case 4: cp_wait<4>(); break;
    case 5: cp_wait<5>(); break;
    default: cp_wait<6>(); break;
  }
}
__device__ __forceinline__ uint32_t lds32(uint32_t addr) {
  uint32_t v;
  asm volatile("ld.shared.b32 %0, [%1];" : "=r"(v) : "r"(addr));
  return v;
}
__device__ __forceinline__ void ldmatrix_x4(uint32_t r[4], uint32_t addr) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(addr));
}
// fp16(v[i] * had_scale) for i = 0..3, stored as 8 bytes at dst (8-byte aligned).
__device__ __forceinline__ void store4_scaled(__half* dst, const float v[4]) {
  __half2 h0 = __halves2half2(__float2half_rn(v[0] * had_scale), __float2half_rn(v[1] * had_scale));
  __half2 h1 = __halves2half2(__float2half_rn(v[2] * had_scale), __float2half_rn(v[3] * had_scale));
  uint2 o;
  o.x = *reinterpret_cast<uint32_t*>(&h0);
  o.y = *reinterpret_cast<uint32_t*>(&h1);
  *reinterpret_cast<uint2*>(dst) = o;
}

// The k split of a launch with `items` (chunk, tile) items: 1 unless the rows fit a partial
// and the items alone leave resident CTAs idle; then the KS (<= 8, >= 1 stage per split) that
// fills whole waves of R CTAs best (a larger KS only when at least 5% better).
__device__ int choose_ks(int items, int R, int nkc, bool rows_fit) {
  if (!rows_fit || items <= 0 || items >= R || items > item_cap) return 1;
  int best = 1;
  float best_eff = static_cast<float>(items) / static_cast<float>(R);
  for (int ks = 2; ks <= max_ks && ks <= nkc && items * ks <= unit_cap; ++ks) {
    const int units = items * ks, waves = (units + R - 1) / R;
    const float eff = static_cast<float>(units) / static_cast<float>(waves * R);
    if (eff > 1.05f * best_eff) best = ks, best_eff = eff;
  }
  return best;
}

// ---------------------------------------------------------------------------------------
// 1. route: one CTA of 1024 threads (E <= 1024, one expert per thread in the scans).
__global__ void __launch_bounds__(1024) route_kernel(const int32_t* __restrict__ ids, int P, int topk, int E,
                                                     ws_ptrs w, int nkc0, int nkc1, int ct0, int ct1, int R0,
                                                     int R1) {
  __shared__ int s_cnt[max_e];
  __shared__ int s_cur[max_e];
  __shared__ int s_warp[32];
  __shared__ int s_max;
  detail::pdl_wait();
  const int tid = threadIdx.x;
  s_cnt[tid] = 0;
  if (tid == 0) s_max = 0;
  __syncthreads();
  for (int p = tid; p < P; p += 1024) {
    const int e = ids[p];
    if (e >= 0 && e < E) atomicAdd(&s_cnt[e], 1);
  }
  __syncthreads();
  const int c = tid < E ? s_cnt[tid] : 0;
  const int nch = (c + MR - 1) / MR;
  int total = 0, nchunks = 0;
  const int off = block_exclusive_scan(c, s_warp, &total);
  const int choff = block_exclusive_scan(nch, s_warp, &nchunks);
  if (c > 0) atomicMax(&s_max, min(c, MR));
  const int active = __syncthreads_count(c > 0);  // also orders the atomicMax before s_max is read
  if (tid < E) {
    w.counts[tid] = c;
    w.offsets[tid] = off;
    s_cur[tid] = off;
  }
  if (tid == 0) w.offsets[E] = total;
  for (int j = 0; j < nch; ++j) w.chunks[choff + j] = make_int4(tid, off + j * MR, min(MR, c - j * MR), 0);
  for (int i = tid; i < 2 * item_cap; i += 1024) w.fix[i] = 0;
  __syncthreads();
  for (int p = tid; p < P; p += 1024) {
    const int e = ids[p];
    if (e >= 0 && e < E) {
      const int s = atomicAdd(&s_cur[e], 1);
      w.slot_tok[s] = p / topk;
      w.slot_exp[s] = e;
      w.pair_slot[p] = s;
    } else {
      w.pair_slot[p] = -1;
    }
  }
  if (tid == 0) {
    plan_hdr h{};
    h.nvalid = total;
    h.nchunks = nchunks;
    h.active = active;
    h.max_rows = s_max;
    const bool fit = s_max <= split_rows;
    h.items[0] = nchunks * ct0;
    h.items[1] = nchunks * ct1;
    h.ks[0] = choose_ks(h.items[0], R0, nkc0, fit);
    h.ks[1] = choose_ks(h.items[1], R1, nkc1, fit);
    h.units[0] = h.items[0] * h.ks[0];
    h.units[1] = h.items[1] * h.ks[1];
    *w.plan = h;  // tickets 0
  }
  detail::pdl_trigger();
}

// ---------------------------------------------------------------------------------------
// 2. input: one warp per (slot, 128-chunk of hidden): fp16(x) ⊙ suh (one fp16 multiply),
// butterflies in f32, × 1/sqrt(128), fp16 — exactly hadamard.cu's input_kernel, for the gate
// and the up suh of the slot's expert.
__global__ void __launch_bounds__(256) input_kernel(const float* __restrict__ x, int64_t P, int64_t hidden, ws_ptrs w,
                                                    const exl3_moe_expert* __restrict__ table) {
  detail::pdl_wait();
  const int lane = threadIdx.x & 31;
  const int64_t gw = (int64_t{blockIdx.x} * blockDim.x + threadIdx.x) >> 5;
  const int64_t cpr = hidden / 128;
  const int64_t s = gw / cpr;
  if (s < P && s < w.plan->nvalid) {
    const int t = w.slot_tok[s], e = w.slot_exp[s];
    const int64_t col = (gw % cpr) * 128 + lane * 4;
    const float4 xv = *reinterpret_cast<const float4*>(x + t * hidden + col);
    const __half* sg = table[e].suh[0] + col;
    const __half* su = table[e].suh[1] + col;
    const float xa[4] = {xv.x, xv.y, xv.z, xv.w};
    float v[4], u[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const __half xh = __float2half_rn(xa[i]);
      v[i] = __half2float(__hmul_rn(xh, sg[i]));
      u[i] = __half2float(__hmul_rn(xh, su[i]));
    }
    butterflies(v, lane);
    butterflies(u, lane);
    store4_scaled(w.xg + s * hidden + col, v);
    store4_scaled(w.xu + s * hidden + col, u);
  }
  detail::pdl_trigger();
}

// ---------------------------------------------------------------------------------------
// 3./4. gate+up (DOWN = false) and down (DOWN = true).
struct mlp_args {
  const exl3_moe_expert* table;
  ws_ptrs w;
  int64_t k, n;     // of this launch's matrices
  int nkc;          // k / KC
  int ct;           // column tiles per chunk
  int D;            // stages
  int stage_bytes;
};

// One work unit of mlp_kernel, decoded by thread 0 into shared memory.
struct unit_desc {
  uint64_t tr0, d1, band;        // trellis: band 0 of stream 0, offset of stream 1, band stride (bytes)
  uint64_t xr0, dx1, row_bytes;  // inputs: row slot0 of input 0, offset of input 1, row stride (bytes)
  int unit, item, ct, e, slot0, rows, nrb, s1, kc0, nk;
};

template <int K, bool DOWN>
struct mlp_geom {
  static constexpr int NA = DOWN ? 1 : 2;           // staged inputs
  static constexpr int TB = 32 * K;                 // bytes per trellis tile
  static constexpr int a_total = NA * A_BYTES;
  static constexpr int t_bytes = (KC / 16) * 2 * 8 * TB;  // bands x streams x 8 tiles
  static constexpr int stage_bytes = a_total + t_bytes;
  static constexpr int t_chunks = 8 * TB / 16;      // 16-byte copies per (band, stream)
};

template <int K, int CB, bool DOWN>
__global__ void __launch_bounds__(threads, 2) mlp_kernel(const mlp_args a) {
  using G = mlp_geom<K, DOWN>;
  extern __shared__ __align__(16) uint8_t smem[];
  __shared__ unit_desc u;
  __shared__ int s_last;
  const uint32_t smem_s = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const int tid = threadIdx.x, warp = tid >> 5, lane = tid & 31, q = lane & 3, g = lane >> 2;
  detail::pdl_wait();
  const int units = a.w.plan->units[DOWN], KS = a.w.plan->ks[DOWN];
  const int64_t tiles_n = a.n / 16;
  const int D = a.D;
  const detail::lane_win<K> lw(lane);
  uint32_t w_lds[3];
#pragma unroll
  for (int j = 0; j < 3; ++j) w_lds[j] = lw.word[j] * 4;
  // ldmatrix.x4 source row / column of this lane within a 16 x 16 block of the staged rows.
  const uint32_t a_lane = (((lane & 7) + ((lane >> 3) & 1) * 8) * AST + (lane >> 4) * 8) * 2;
  float* epi = reinterpret_cast<float*>(smem);  // [2][16][EST], aliases the stages

  for (;;) {
    __syncthreads();  // the previous unit is done with `u`, s_last and the shared memory
    if (tid == 0) {
      // The unit's parameters, kept in shared memory (re-read per stage) to spare registers.
      const int unit = atomicAdd(&a.w.plan->ticket[DOWN], 1);
      u.unit = unit;
      if (unit < units) {
        const int item = unit / KS, ks = unit - item * KS;
        const int chunk = item / a.ct, ct = item - chunk * a.ct;
        const int4 ch = a.w.chunks[chunk];
        u.item = item, u.ct = ct, u.e = ch.x, u.slot0 = ch.y, u.rows = ch.z, u.nrb = (ch.z + 15) >> 4;
        u.kc0 = ks * a.nkc / KS;
        u.nk = (ks + 1) * a.nkc / KS - u.kc0;
        // Trellis bytes of band 0, stream 0 (tile tn0), and the distance to stream 1's (tile
        // tn0 of up for gate+up, tile tn0 + 8 of the same matrix for down), as integers.
        const int64_t tn0 = DOWN ? int64_t{ct} * 16 : int64_t{ct} * 8;
        u.s1 = !DOWN || tn0 + 8 < tiles_n;
        const exl3_moe_expert& ex = a.table[ch.x];
        u.tr0 = reinterpret_cast<uint64_t>(ex.trellis[DOWN ? 2 : 0]) + tn0 * G::TB;
        u.d1 = DOWN ? uint64_t{8 * G::TB} : reinterpret_cast<uint64_t>(ex.trellis[1]) + tn0 * G::TB - u.tr0;
        u.band = static_cast<uint64_t>(tiles_n) * G::TB;
        u.xr0 = reinterpret_cast<uint64_t>((DOWN ? a.w.hh : a.w.xg) + int64_t{ch.y} * a.k);
        u.dx1 = DOWN ? 0 : reinterpret_cast<uint64_t>(a.w.xu) - reinterpret_cast<uint64_t>(a.w.xg);
        u.row_bytes = static_cast<uint64_t>(a.k) * 2;
      }
    }
    __syncthreads();
    if (u.unit >= units) break;
    const int nrb = u.nrb, nk = u.nk, kc0 = u.kc0;
    const bool s1 = u.s1;

    // Stage `st` <- k chunk kc: the chunk's rows of the input(s), the 4 bands of both streams.
    auto load = [&](int st, int kc) {
      const uint32_t base = smem_s + static_cast<uint32_t>(st * a.stage_bytes);
      const int c8 = tid & 7, rows = u.rows;
#pragma unroll
      for (int which = 0; which < G::NA; ++which)
        for (int r = tid >> 3; r < nrb * 16; r += threads / 8) {
          const uint64_t src = u.xr0 + which * u.dx1 + static_cast<uint64_t>(min(r, rows - 1)) * u.row_bytes +
                               (kc * KC + c8 * 8) * 2;
          cp_async_zfill(base + which * A_BYTES + r * (AST * 2) + c8 * 16, reinterpret_cast<const void*>(src),
                         r < rows ? 16 : 0);
        }
      for (int i = tid; i < (KC / 16) * 2 * G::t_chunks; i += threads) {
        const int b = i / (2 * G::t_chunks), rem = i % (2 * G::t_chunks);
        const int s = rem / G::t_chunks, j = rem % G::t_chunks;
        if (s == 0 || s1) {
          const uint64_t src = u.tr0 + s * u.d1 + (static_cast<uint64_t>(kc) * (KC / 16) + b) * u.band + j * 16;
          cp_async_cg(base + G::a_total + ((b * 2 + s) * 8) * G::TB + j * 16, reinterpret_cast<const void*>(src));
        }
      }
    };

    float c[2][4][2][4];
#pragma unroll
    for (int s = 0; s < 2; ++s)
#pragma unroll
      for (int rb = 0; rb < 4; ++rb)
#pragma unroll
        for (int h = 0; h < 2; ++h)
#pragma unroll
          for (int i = 0; i < 4; ++i) c[s][rb][h][i] = 0.0f;

    for (int st = 0; st < D - 1; ++st) {
      if (st < nk) load(st, kc0 + st);
      cp_commit();
    }
    int cst = 0, lst = D - 1;  // stage computed, stage loaded next
    for (int i = 0; i < nk; ++i) {
      cp_wait_dyn(D - 2);  // stage i has landed (this thread's copies) ...
      __syncthreads();     // ... everyone's; and stage i - 1 is free for refilling
      if (i + D - 1 < nk) load(lst, kc0 + i + D - 1);
      cp_commit();
      lst = lst + 1 == D ? 0 : lst + 1;
      const uint32_t base = smem_s + static_cast<uint32_t>(cst * a.stage_bytes);
#pragma unroll
      for (int kk = 0; kk < KC / 16; ++kk) {
        uint32_t b[2][4] = {};
#pragma unroll
        for (int s = 0; s < 2; ++s) {
          if (s == 0 || s1) {
            const uint32_t tb = base + G::a_total + ((kk * 2 + s) * 8 + warp) * G::TB;
            uint32_t wv[3];
#pragma unroll
            for (int j = 0; j < detail::geom<K>::win; ++j) wv[j] = lds32(tb + w_lds[j]);
            detail::lane_fragments<K, CB>(wv, lw.shift, b[s]);
          }
        }
#pragma unroll
        for (int rb = 0; rb < 4; ++rb) {
          if (rb < nrb) {
            uint32_t a0[4];
            ldmatrix_x4(a0, base + rb * (16 * AST * 2) + kk * 32 + a_lane);
            mma16816(c[0][rb][0], a0, b[0][0], b[0][1]);
            mma16816(c[0][rb][1], a0, b[0][2], b[0][3]);
            if constexpr (DOWN) {
              if (s1) {
                mma16816(c[1][rb][0], a0, b[1][0], b[1][1]);
                mma16816(c[1][rb][1], a0, b[1][2], b[1][3]);
              }
            } else {
              uint32_t a1[4];
              ldmatrix_x4(a1, base + A_BYTES + rb * (16 * AST * 2) + kk * 32 + a_lane);
              mma16816(c[1][rb][0], a1, b[1][0], b[1][1]);
              mma16816(c[1][rb][1], a1, b[1][2], b[1][3]);
            }
          }
        }
      }
      cst = cst + 1 == D ? 0 : cst + 1;
    }
    cp_wait<0>();
    __syncthreads();  // the stages are free: the epilogue buffer aliases them

    // Epilogue rows [rb*16, rb*16+16) of the chunk from epi: warp w takes rows w and w + 8.
    auto finish = [&](int rb) {
      const int rows = u.rows, ct = u.ct;
      const int64_t slot0 = u.slot0;
      const exl3_moe_expert& ex = a.table[u.e];
#pragma unroll
      for (int rr0 = 0; rr0 < 16; rr0 += 8) {
        const int rr = rr0 + warp, row = rb * 16 + rr;
        if (row >= rows) continue;
        const int64_t slot = slot0 + row;
        if constexpr (!DOWN) {
          const float4 gv = *reinterpret_cast<const float4*>(epi + rr * EST + 4 * lane);
          const float4 uv = *reinterpret_cast<const float4*>(epi + (16 + rr) * EST + 4 * lane);
          float v[4] = {gv.x, gv.y, gv.z, gv.w}, w4[4] = {uv.x, uv.y, uv.z, uv.w};
          butterflies(v, lane);
          butterflies(w4, lane);
          const int64_t col = int64_t{ct} * 128 + 4 * lane;
          const __half* svg = ex.svh[0] + col;
          const __half* svu = ex.svh[1] + col;
          const __half* sud = ex.suh[2] + col;
          float h[4];
#pragma unroll
          for (int i = 0; i < 4; ++i) {
            const float gf = __half2float(__hmul_rn(__float2half_rn(v[i] * had_scale), svg[i]));
            const float uf = __half2float(__hmul_rn(__float2half_rn(w4[i] * had_scale), svu[i]));
            const float act = gf / (1.0f + expf(-gf)) * uf;
            h[i] = __half2float(__hmul_rn(__float2half_rn(act), sud[i]));
          }
          butterflies(h, lane);
          store4_scaled(a.w.hh + slot * a.n + col, h);
        } else {
#pragma unroll
          for (int s = 0; s < 2; ++s) {
            if (s == 1 && !s1) continue;
            const float4 dv = *reinterpret_cast<const float4*>(epi + (s * 16 + rr) * EST + 4 * lane);
            float v[4] = {dv.x, dv.y, dv.z, dv.w};
            butterflies(v, lane);
            const int64_t col = int64_t{ct} * 256 + s * 128 + 4 * lane;
            const __half* sv = ex.svh[2] + col;
            __half2 h0 = __halves2half2(__hmul_rn(__float2half_rn(v[0] * had_scale), sv[0]),
                                        __hmul_rn(__float2half_rn(v[1] * had_scale), sv[1]));
            __half2 h1 = __halves2half2(__hmul_rn(__float2half_rn(v[2] * had_scale), sv[2]),
                                        __hmul_rn(__float2half_rn(v[3] * had_scale), sv[3]));
            uint2 o;
            o.x = *reinterpret_cast<uint32_t*>(&h0);
            o.y = *reinterpret_cast<uint32_t*>(&h1);
            *reinterpret_cast<uint2*>(a.w.dout + slot * a.n + col) = o;
          }
        }
      }
    };

    if (KS > 1) {
      // Split k (every chunk <= 16 rows: row block 0 only). Partial of this unit, then the
      // last CTA of the item sums the item's KS partials in order.
      const int unit = u.unit, item = u.item;
      float* part = a.w.part + int64_t{unit} * part_floats;
#pragma unroll
      for (int s = 0; s < 2; ++s)
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          const int col = s * 128 + warp * 16 + h * 8 + 2 * q;
          *reinterpret_cast<float2*>(part + g * 256 + col) = make_float2(c[s][0][h][0], c[s][0][h][1]);
          *reinterpret_cast<float2*>(part + (g + 8) * 256 + col) = make_float2(c[s][0][h][2], c[s][0][h][3]);
        }
      __threadfence();
      __syncthreads();
      if (tid == 0) s_last = atomicAdd(a.w.fix + (DOWN ? item_cap : 0) + item, 1) == KS - 1;
      __syncthreads();
      if (!s_last) continue;
      __threadfence();
      const float4* p0 = reinterpret_cast<const float4*>(a.w.part + int64_t{item} * KS * part_floats);
      for (int i = tid; i < part_floats / 4; i += threads) {
        float4 v = __ldcg(p0 + i);
        for (int j = 1; j < KS; ++j) {
          const float4 p = __ldcg(p0 + j * (part_floats / 4) + i);
          v.x += p.x, v.y += p.y, v.z += p.z, v.w += p.w;
        }
        const int r = i / 64, col = (i % 64) * 4;  // 64 float4 per 256-column row
        *reinterpret_cast<float4*>(epi + ((col >> 7) * 16 + r) * EST + (col & 127)) = v;
      }
      __syncthreads();
      finish(0);
    } else {
#pragma unroll
      for (int rb = 0; rb < 4; ++rb) {
        if (rb < nrb) {
          if (rb > 0) __syncthreads();  // the previous block's rows have been read
#pragma unroll
          for (int s = 0; s < 2; ++s)
#pragma unroll
            for (int h = 0; h < 2; ++h) {
              const int col = warp * 16 + h * 8 + 2 * q;
              *reinterpret_cast<float2*>(epi + (s * 16 + g) * EST + col) = make_float2(c[s][rb][h][0], c[s][rb][h][1]);
              *reinterpret_cast<float2*>(epi + (s * 16 + g + 8) * EST + col) =
                  make_float2(c[s][rb][h][2], c[s][rb][h][3]);
            }
          __syncthreads();
          finish(rb);
        }
      }
    }
  }
  detail::pdl_trigger();
}

// ---------------------------------------------------------------------------------------
// 5. combine: y[t][c] = sum_j w[t][j] * dout[slot(t, j)][c], j in order, four columns per
// thread; every element of y written.
__global__ void __launch_bounds__(256) combine_kernel(const float* __restrict__ wts, int64_t T, int topk,
                                                      int64_t hidden, ws_ptrs w, float* __restrict__ y) {
  detail::pdl_wait();
  const int64_t per = hidden / 4;
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < T * per) {
    const int64_t t = i / per, col = (i % per) * 4;
    float acc[4] = {0.0f, 0.0f, 0.0f, 0.0f};
    for (int j = 0; j < topk; ++j) {
      const int s = w.pair_slot[t * topk + j];
      if (s < 0) continue;
      const float wv = wts[t * topk + j];
      const uint2 raw = *reinterpret_cast<const uint2*>(w.dout + int64_t{s} * hidden + col);
      const __half2 h0 = *reinterpret_cast<const __half2*>(&raw.x), h1 = *reinterpret_cast<const __half2*>(&raw.y);
      const float d[4] = {__low2float(h0), __high2float(h0), __low2float(h1), __high2float(h1)};
#pragma unroll
      for (int k = 0; k < 4; ++k) acc[k] = __fadd_rn(acc[k], __fmul_rn(wv, d[k]));
    }
    *reinterpret_cast<float4*>(y + t * hidden + col) = make_float4(acc[0], acc[1], acc[2], acc[3]);
  }
  detail::pdl_trigger();
}

// ---------------------------------------------------------------------------------------
// Host side.

void require(bool ok, const std::string& what) {
  if (!ok) throw std::invalid_argument("exl3_moe: " + what);
}
void ck(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("exl3_moe: ") + what + ": " + cudaGetErrorString(e));
}

void validate(const exl3_moe_shape& s) {
  require(s.experts >= 1 && s.experts <= exl3_moe_max_experts, "experts must be 1.." +
                                                                    std::to_string(exl3_moe_max_experts));
  require(s.topk >= 1, "topk must be >= 1");
  require(s.hidden > 0 && s.hidden % 128 == 0, "hidden must be a positive multiple of 128");
  require(s.width > 0 && s.width % 128 == 0, "width must be a positive multiple of 128");
  require(s.K >= 1 && s.K <= 8, "K must be 1..8");
  require(s.cb >= 0 && s.cb <= 2, "codebook must be 0..2");
}

struct kcfg {
  int D = 0, stage = 0, smem = 0, ctas = 0;
};

// Stages, shared memory and resident CTAs of one mlp_kernel instance on the current device.
template <int K, int CB, bool DOWN>
kcfg config_of() {
  static kcfg cache[16];
  int dev = 0;
  ck(cudaGetDevice(&dev), "cudaGetDevice");
  kcfg& c = cache[dev & 15];
  if (c.ctas == 0) {
    int sm_smem = 0, optin = 0, sms = 0;
    ck(cudaDeviceGetAttribute(&sm_smem, cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev), "attribute");
    ck(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev), "attribute");
    ck(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "attribute");
    kcfg n;
    n.stage = mlp_geom<K, DOWN>::stage_bytes;
    const int two = sm_smem / 2 - 1024, one = std::min(optin, sm_smem - 1024);  // 1 KB reserved per CTA
    n.D = std::min(8, two / n.stage);
    if (n.D < 3) n.D = std::min(8, one / n.stage);
    if (n.D < 2) throw std::runtime_error("exl3_moe: not enough shared memory per block for 2 stages");
    n.smem = std::max(n.D * n.stage, EPI_BYTES);
    ck(cudaFuncSetAttribute(mlp_kernel<K, CB, DOWN>, cudaFuncAttributeMaxDynamicSharedMemorySize, n.smem),
       "cudaFuncSetAttribute");
    int per_sm = 0;
    ck(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, mlp_kernel<K, CB, DOWN>, threads, n.smem),
       "occupancy");
    if (per_sm < 1) throw std::runtime_error("exl3_moe: the MoE kernel cannot be resident on this device");
    n.ctas = per_sm * sms;
    c = n;
  }
  return c;
}

int64_t ct_of(const exl3_moe_shape& s, bool down) { return down ? (s.hidden + 255) / 256 : s.width / 128; }

}  // namespace

std::vector<exl3_moe_expert> exl3_moe_table(const exl3_moe_shape& s, const dev_exl3* gate, const dev_exl3* up,
                                            const dev_exl3* down) {
  validate(s);
  std::vector<exl3_moe_expert> t(static_cast<size_t>(s.experts));
  for (int64_t e = 0; e < s.experts; ++e) {
    const dev_exl3* m[3] = {gate + e, up + e, down + e};
    for (int i = 0; i < 3; ++i) {
      const dev_exl3& d = *m[i];
      const std::string who = "expert " + std::to_string(e) + (i == 0 ? " gate" : i == 1 ? " up" : " down");
      require(d.K == s.K && d.cb == s.cb, who + ": K / codebook differ from the shape's");
      require(i < 2 ? d.k == s.hidden && d.n == s.width : d.k == s.width && d.n == s.hidden,
              who + ": dimensions differ from the shape's");
      require(d.trellis && d.suh && d.svh, who + ": missing trellis / suh / svh");
      require(reinterpret_cast<uintptr_t>(d.trellis) % 16 == 0, who + ": trellis not 16-byte aligned");
      require(d.bias == nullptr, who + ": bias is not supported");
      t[e].trellis[i] = d.trellis;
      t[e].suh[i] = d.suh;
      t[e].svh[i] = d.svh;
    }
  }
  return t;
}

size_t exl3_moe_workspace_bytes(const exl3_moe_shape& s, int64_t max_tokens) {
  validate(s);
  return ws_layout(s, std::max<int64_t>(max_tokens, 1) * s.topk).total;
}

const int32_t* exl3_moe_counts(const exl3_moe_shape& s, int64_t tokens, const void* workspace) {
  return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(workspace) +
                                          ws_layout(s, std::max<int64_t>(tokens, 1) * s.topk).off[1]);
}
const int32_t* exl3_moe_offsets(const exl3_moe_shape& s, int64_t tokens, const void* workspace) {
  return reinterpret_cast<const int32_t*>(static_cast<const uint8_t*>(workspace) +
                                          ws_layout(s, std::max<int64_t>(tokens, 1) * s.topk).off[2]);
}

exl3_moe_stats exl3_moe_read_stats(const exl3_moe_shape& s, int64_t tokens, const void* workspace,
                                   cudaStream_t stream) {
  validate(s);
  plan_hdr h{};
  const ws_layout L(s, std::max<int64_t>(tokens, 1) * s.topk);
  ck(cudaMemcpyAsync(&h, static_cast<const uint8_t*>(workspace) + L.off[0], sizeof h, cudaMemcpyDeviceToHost, stream),
     "read stats");
  ck(cudaStreamSynchronize(stream), "read stats");
  exl3_moe_stats r;
  r.valid_pairs = h.nvalid, r.active_experts = h.active, r.chunks = h.nchunks, r.max_chunk_rows = h.max_rows;
  for (int i = 0; i < 2; ++i) r.k_splits[i] = h.ks[i], r.units[i] = h.units[i];
  detail::dispatch_k_cb(s.K, s.cb, [&]<int K, int CB>() {
    r.ctas[0] = config_of<K, CB, false>().ctas;
    r.ctas[1] = config_of<K, CB, true>().ctas;
  });
  return r;
}

void exl3_moe_forward(const exl3_moe_shape& s, const exl3_moe_expert* table, const float* x, int64_t tokens,
                      const int32_t* ids, const float* weights, float* y, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream) {
  validate(s);
  require(tokens >= 0, "negative token count");
  if (tokens == 0) return;
  const int64_t P = tokens * s.topk;
  require(P <= (int64_t{1} << 30) && P * (s.hidden / 4) / 256 < (int64_t{1} << 31),
          "too many (token, expert) pairs for one forward");
  require(table && x && ids && weights && y && workspace, "null pointer");
  require(reinterpret_cast<uintptr_t>(x) % 16 == 0 && reinterpret_cast<uintptr_t>(y) % 16 == 0,
          "x and y must be 16-byte aligned");
  require(reinterpret_cast<uintptr_t>(workspace) % 256 == 0, "workspace must be 256-byte aligned");
  const ws_layout L(s, P);
  require(L.total <= workspace_bytes, "workspace too small (exl3_moe_workspace_bytes)");
  const ws_ptrs w = L.carve(workspace);
  const int nkc0 = static_cast<int>(s.hidden / KC), nkc1 = static_cast<int>(s.width / KC);
  const int ct0 = static_cast<int>(ct_of(s, false)), ct1 = static_cast<int>(ct_of(s, true));
  detail::dispatch_k_cb(s.K, s.cb, [&]<int K, int CB>() {
    const kcfg c0 = config_of<K, CB, false>(), c1 = config_of<K, CB, true>();
    detail::launch_pdl(route_kernel, dim3(1), dim3(1024), 0, stream, ids, static_cast<int>(P),
                       static_cast<int>(s.topk), static_cast<int>(s.experts), w, nkc0, nkc1, ct0, ct1, c0.ctas,
                       c1.ctas);
    const int64_t in_threads = P * (s.hidden / 128) * 32;
    detail::launch_pdl(input_kernel, dim3(static_cast<unsigned>((in_threads + 255) / 256)), dim3(256), 0, stream, x,
                       P, s.hidden, w, table);
    const mlp_args a0{table, w, s.hidden, s.width, nkc0, ct0, c0.D, c0.stage};
    detail::launch_pdl(mlp_kernel<K, CB, false>, dim3(static_cast<unsigned>(c0.ctas)), dim3(threads),
                       static_cast<size_t>(c0.smem), stream, a0);
    const mlp_args a1{table, w, s.width, s.hidden, nkc1, ct1, c1.D, c1.stage};
    detail::launch_pdl(mlp_kernel<K, CB, true>, dim3(static_cast<unsigned>(c1.ctas)), dim3(threads),
                       static_cast<size_t>(c1.smem), stream, a1);
    const int64_t out_threads = tokens * (s.hidden / 4);
    detail::launch_pdl(combine_kernel, dim3(static_cast<unsigned>((out_threads + 255) / 256)), dim3(256), 0, stream,
                       weights, tokens, static_cast<int>(s.topk), s.hidden, w, y);
  });
}

// ---------------------------------------------------------------------------------------
// Random fills for tests and benches.
namespace {

__device__ __forceinline__ uint64_t mix64(uint64_t z) {  // splitmix64's finalizer
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

__global__ void __launch_bounds__(256) fill_words_kernel(uint16_t* __restrict__ dst, size_t count, uint64_t seed) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < (count + 3) / 4; i += stride) {
    const uint64_t h = mix64(seed * 0x9E3779B97F4A7C15ull + i);
    for (int j = 0; j < 4 && 4 * i + j < count; ++j) dst[4 * i + j] = static_cast<uint16_t>(h >> (16 * j));
  }
}

__global__ void __launch_bounds__(256) fill_scales_kernel(__half* __restrict__ dst, size_t count, uint64_t seed,
                                                          float scale) {
  const size_t stride = size_t{gridDim.x} * blockDim.x;
  for (size_t i = size_t{blockIdx.x} * blockDim.x + threadIdx.x; i < count; i += stride) {
    const uint64_t h = mix64(seed * 0x9E3779B97F4A7C15ull + i);
    const float mag = 0.5f + static_cast<float>(h >> 40) * (1.0f / 16777216.0f);  // [0.5, 1.5)
    dst[i] = __float2half_rn((h & 1 ? -mag : mag) * scale);
  }
}

unsigned fill_blocks(size_t n) { return static_cast<unsigned>(std::min<size_t>((n + 255) / 256, 65536)); }

}  // namespace

void exl3_moe_fill_random_words(uint16_t* dst, size_t count, uint64_t seed, cudaStream_t stream) {
  if (count == 0) return;
  fill_words_kernel<<<fill_blocks((count + 3) / 4), 256, 0, stream>>>(dst, count, seed);
}

void exl3_moe_fill_random_scales(__half* dst, size_t count, uint64_t seed, float scale, cudaStream_t stream) {
  if (count == 0) return;
  fill_scales_kernel<<<fill_blocks(count), 256, 0, stream>>>(dst, count, seed, scale);
}

// ---------------------------------------------------------------------------------------
// The per-expert loop baseline.
namespace {

__global__ void __launch_bounds__(256) gather_kernel(const float* __restrict__ x, const int32_t* __restrict__ tok,
                                                     int64_t rows, int64_t hidden, float* __restrict__ xe) {
  detail::pdl_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x, per = hidden / 4;
  if (i < rows * per) {
    const int64_t r = i / per, c = (i % per) * 4;
    *reinterpret_cast<float4*>(xe + r * hidden + c) = *reinterpret_cast<const float4*>(x + tok[r] * hidden + c);
  }
  detail::pdl_trigger();
}

__global__ void __launch_bounds__(256) act_kernel(float* __restrict__ g, const float* __restrict__ u, int64_t count) {
  detail::pdl_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < count) {
    const float gf = g[i];
    g[i] = gf / (1.0f + expf(-gf)) * u[i];
  }
  detail::pdl_trigger();
}

__global__ void __launch_bounds__(256) scatter_kernel(const float* __restrict__ d, const int32_t* __restrict__ tok,
                                                      const float* __restrict__ wt, int64_t rows, int64_t hidden,
                                                      float* __restrict__ y) {
  detail::pdl_wait();
  const int64_t i = int64_t{blockIdx.x} * blockDim.x + threadIdx.x;
  if (i < rows * hidden) {
    const int64_t r = i / hidden, c = i % hidden;
    atomicAdd(y + tok[r] * hidden + c, __fmul_rn(wt[r], d[i]));
  }
  detail::pdl_trigger();
}

unsigned blocks_of(int64_t n) { return static_cast<unsigned>((n + 255) / 256); }

}  // namespace

exl3_moe_loop::exl3_moe_loop(const exl3_moe_shape& s, const dev_exl3* gate, const dev_exl3* up,
                             const dev_exl3* down, const int32_t* ids, const float* weights, int64_t tokens,
                             exl3_gemm_fn gemm)
    : s_(s), tokens_(tokens), gemm_(std::move(gemm)) {
  (void)exl3_moe_table(s, gate, up, down);  // validates
  require(tokens >= 0, "negative token count");
  const auto E = static_cast<size_t>(s.experts);
  gate_.assign(gate, gate + E), up_.assign(up, up + E), down_.assign(down, down + E);
  // Group the pairs by expert, tokens ascending within an expert.
  count_.assign(E, 0), start_.assign(E, 0);
  for (int64_t p = 0; p < tokens * s.topk; ++p)
    if (ids[p] >= 0 && ids[p] < s.experts) ++count_[static_cast<size_t>(ids[p])];
  int64_t total = 0;
  for (size_t e = 0; e < E; ++e) {
    start_[e] = total, total += count_[e];
    active_ += count_[e] > 0;
    max_rows_ = std::max(max_rows_, count_[e]);
  }
  std::vector<int32_t> tok(static_cast<size_t>(std::max<int64_t>(total, 1)));
  std::vector<float> wt(tok.size());
  std::vector<int64_t> fill = start_;
  for (int64_t p = 0; p < tokens * s.topk; ++p)
    if (ids[p] >= 0 && ids[p] < s.experts) {
      const int64_t at = fill[static_cast<size_t>(ids[p])]++;
      tok[static_cast<size_t>(at)] = static_cast<int32_t>(p / s.topk);
      wt[static_cast<size_t>(at)] = weights[p];
    }
  // One allocation: lists, then the scratch of the largest expert.
  const int64_t m = std::max<int64_t>(max_rows_, 1), wide = std::max(s.hidden, s.width);
  const bool gemm_rows = max_rows_ > exl3_gemv_max_rows;
  size_t gemv_ws = 0;
  for (const dev_exl3* d : {&gate_[0], &down_[0]})
    gemv_ws = std::max(gemv_ws, exl3_gemv_scratch_bytes(*d, std::min(m, exl3_gemv_max_rows)));
  const size_t sizes[10] = {tok.size() * 4,
                            wt.size() * 4,
                            static_cast<size_t>(m * s.hidden) * 4,
                            static_cast<size_t>(m * s.width) * 4,
                            static_cast<size_t>(m * s.width) * 4,
                            static_cast<size_t>(m * s.hidden) * 4,
                            gemm_rows ? static_cast<size_t>(m * wide) * 4 : 0,
                            gemm_rows ? static_cast<size_t>(s.hidden * s.width) * 2 : 0,
                            gemm_rows ? static_cast<size_t>(m * wide) * 2 : 0,
                            gemv_ws};
  size_t off[10], bytes = 0;
  for (int i = 0; i < 10; ++i) off[i] = bytes, bytes += align256(sizes[i]);
  ck(cudaMalloc(&mem_, bytes), "cudaMalloc (loop)");
  auto* b = static_cast<uint8_t*>(mem_);
  tok_ = reinterpret_cast<int32_t*>(b + off[0]);
  w_ = reinterpret_cast<float*>(b + off[1]);
  xe_ = reinterpret_cast<float*>(b + off[2]);
  g_ = reinterpret_cast<float*>(b + off[3]);
  u_ = reinterpret_cast<float*>(b + off[4]);
  d_ = reinterpret_cast<float*>(b + off[5]);
  acc_ = reinterpret_cast<float*>(b + off[6]);
  what_ = reinterpret_cast<__half*>(b + off[7]);
  xh_ = reinterpret_cast<__half*>(b + off[8]);
  gemv_ws_ = b + off[9];
  ck(cudaMemcpy(tok_, tok.data(), tok.size() * 4, cudaMemcpyHostToDevice), "upload (loop)");
  ck(cudaMemcpy(w_, wt.data(), wt.size() * 4, cudaMemcpyHostToDevice), "upload (loop)");
  ck(cudaDeviceSynchronize(), "upload (loop)");  // pageable copies may return before their DMA lands
}

exl3_moe_loop::~exl3_moe_loop() {
  if (mem_) cudaFree(mem_);
}

void exl3_moe_loop::linear(const dev_exl3& w, const float* x, int64_t rows, float* y, cudaStream_t stream) const {
  if (rows <= exl3_gemv_max_rows) {
    exl3_gemv(w, x, rows, w.k, nullptr, w.n, y, gemv_ws_, stream);
    return;
  }
  exl3_reconstruct(w, what_, stream);
  exl3_input_transform(w, x, rows, w.k, xh_, nullptr, stream);
  gemm_(xh_, what_, acc_, rows, w.k, w.n, stream);
  exl3_output_transform(w, acc_, rows, nullptr, w.n, y, stream);
}

void exl3_moe_loop::run(const float* x, float* y, cudaStream_t stream) const {
  if (tokens_ == 0) return;
  ck(cudaMemsetAsync(y, 0, static_cast<size_t>(tokens_ * s_.hidden) * 4, stream), "cudaMemsetAsync (loop)");
  for (size_t e = 0; e < count_.size(); ++e) {
    const int64_t n = count_[e];
    if (n == 0) continue;
    const int32_t* tok = tok_ + start_[e];
    detail::launch_pdl(gather_kernel, dim3(blocks_of(n * s_.hidden / 4)), dim3(256), 0, stream, x, tok, n, s_.hidden,
                       xe_);
    linear(gate_[e], xe_, n, g_, stream);
    linear(up_[e], xe_, n, u_, stream);
    detail::launch_pdl(act_kernel, dim3(blocks_of(n * s_.width)), dim3(256), 0, stream, g_,
                       static_cast<const float*>(u_), n * s_.width);
    linear(down_[e], g_, n, d_, stream);
    detail::launch_pdl(scatter_kernel, dim3(blocks_of(n * s_.hidden)), dim3(256), 0, stream,
                       static_cast<const float*>(d_), tok, static_cast<const float*>(w_ + start_[e]), n, s_.hidden,
                       y);
  }
}

}  // namespace tandem::exl3::cuda
