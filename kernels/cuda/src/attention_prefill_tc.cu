// Tensor-core paged attention for prefill (FlashAttention-2 style), f16 operands, f32
// accumulation. Same semantics as attention_prefill / ref::paged_attention: a variable-length
// batch of chunks (query_start, seq_lens), causal within the sequence, GQA, paged KV of f32,
// bf16 or fp8 e4m3 (dev_kv::type).
//
// Work decomposition
//  - GQA packing: the G = n_heads / n_kv_heads query heads of one KV head are packed as rows
//    of one M dimension, packed row j of sequence s = (token j / G, head kvh*G + j % G). A block
//    owns BM packed rows of one sequence and one KV head, so one K/V tile in shared memory
//    serves all G heads (the f32 K/V pool is read and converted once per BM rows).
//  - Blocks map to (sequence, tile) with no host data: sequence s owns the tile slots
//    [floor(query_start[s]*G / BM) + s, ...) of a grid of floor(n_tokens*G / BM) + n_seqs
//    slots (at most n_seqs of them idle); each block binary-searches its sequence. Slots run
//    last to first, KV head fastest, so the longest causal tiles start first.
//  - NW warps each own 16*WM packed rows. Q is loaded once, pre-scaled by scale*log2(e),
//    as f16 mma A fragments in registers. For each key tile of BN keys:
//      S = Q K^T (mma.sync m16n8k16, K B fragments by ldmatrix from a swizzled f16 tile),
//      causal mask on diagonal tiles only, online softmax in base 2 (ex2.approx),
//      P packed to f16 in registers and used as the A fragment of O += P V (V B fragments
//      by ldmatrix.trans).
//  - K/V tiles: gathered through the page table from the pool, converted to f16 and
//    stored into a double-buffered shared tile. cp.async cannot convert, so the next tile's
//    global loads are issued into registers at the top of an iteration and stored (as f16) at
//    its bottom: one __syncthreads per key tile. Row slots of each tile are looked up once per
//    tile (one thread per key) into a small shared table.
//
// Resources (ptxas, nvcc 13.0): HD 64 214 registers (sm_90a) / 223 (sm_121a), 16.6 KB static
// shared memory; HD 128 208 / 230 registers, 33 KB; no spills; one 256-thread block per SM.
//
// Precision: f16 (11-bit significand) rather than bf16 (8-bit): Q*scale, K and V are O(1)
// activations and P is in [0, 1], all far inside f16's range, so f16 gives 8x smaller operand
// rounding. Expected ||out - ref|| / ||ref|| ~ 3e-4 .. 1e-3. A bf16 or fp8 pool is not fed
// to a bf16 / fp8 mma: that would round Q and P as coarsely too. Its K and V widen to f16
// exactly (kv_elem.cuh), so the f16 mma adds no rounding beyond the pool's own, Q and P keep
// f16, and each 16-byte f16 chunk costs 8 or 16 bytes of pool reads instead of 32.
#include <cuda_fp16.h>

#include <cstdint>

#include "common.cuh"
#include "kv_elem.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ uint32_t pack_half2(float lo, float hi) {
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void mma_16816(float (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void ldsm_x4(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ void ldsm_x4_t(uint32_t addr, uint32_t& r0, uint32_t& r1, uint32_t& r2, uint32_t& r3) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
               : "=r"(r0), "=r"(r1), "=r"(r2), "=r"(r3)
               : "r"(addr));
}

__device__ __forceinline__ uint4 ld_nc16(const void* p) {
  uint4 v;
  asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
               : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
               : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_nc8(const void* p) {
  uint2 v;
  asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

// Eight consecutive pool elements in flight (registers), then stored as one 16-byte f16
// chunk of a tile: 32 bytes of f32, 16 of bf16 or 8 of fp8 per chunk.
template <kv_elem E>
struct chunk8 {
  static constexpr int bytes = 8 * detail::kv_bytes<E>;
  uint4 u[bytes == 32 ? 2 : 1];  // fp8: the low 8 bytes of u[0]
  __device__ __forceinline__ void load(const detail::kv_t<E>* src) {
    if constexpr (bytes == 32) {
      u[0] = ld_nc16(src), u[1] = ld_nc16(src + 4);
    } else if constexpr (bytes == 16) {
      u[0] = ld_nc16(src);
    } else {
      const uint2 a = ld_nc8(src);
      u[0] = make_uint4(a.x, a.y, 0u, 0u);
    }
  }
  __device__ __forceinline__ void zero() {
    u[0] = make_uint4(0u, 0u, 0u, 0u);
    if constexpr (bytes == 32) u[1] = u[0];
  }
  __device__ __forceinline__ uint4 to_f16() const {
    float x[16];
    detail::kv_widen16<E>(u[0], x);
    if constexpr (bytes == 32) detail::kv_widen16<E>(u[1], x + 4);
    return make_uint4(pack_half2(x[0], x[1]), pack_half2(x[2], x[3]), pack_half2(x[4], x[5]),
                      pack_half2(x[6], x[7]));
  }
};

// Tile geometry. HD: head dim; WM: 16-row m tiles per warp; BN: keys per tile; NW: warps.
template <int HD_, int WM_, int BN_, int NW_>
struct fa_cfg {
  static constexpr int HD = HD_, WM = WM_, BN = BN_, NW = NW_;
  static constexpr int BM = NW * 16 * WM;  // packed rows per block
  static constexpr int THREADS = NW * 32;
  static constexpr int CPR = HD / 8;             // 16-byte f16 chunks per tile row
  static constexpr int RPP = THREADS / CPR;      // tile rows per load pass
  static constexpr int NP = BN / RPP;            // load passes per tile (each 2 float4 per thread)
  static_assert(THREADS % CPR == 0 && BN % RPP == 0 && NP >= 1, "tile load shape");
  static_assert(BN <= THREADS, "one thread per key fills the slot table");
  static_assert(BN % 16 == 0 && HD % 16 == 0, "mma shape");
};
// HD 64: 8 warps x 32 rows (BM 256), 32-key tiles. Each f32 K/V element read from L2 serves
// 256 packed rows (128 FLOP per byte: at 300 TFLOP/s that is ~2.3 TB/s of L2 reads), and
// each ldmatrix'd fragment feeds 2 mma (32 FLOP per shared byte). 64-key tiles need more
// than 255 registers at 32 rows per warp (ptxas spills); 16 rows per warp halves both ratios.
using cfg64 = fa_cfg<64, 2, 32, 8>;
// HD 128: 32 rows per warp would need ~300 registers (O alone is 128): 8 warps x 16 rows
// (BM 128), 32-key tiles (64-key tiles need 66 KB of shared memory and 249 registers).
using cfg128 = fa_cfg<128, 1, 32, 8>;

template <class C, kv_elem E>
__global__ void __launch_bounds__(C::THREADS, 1)
    fa_prefill_kernel(const float* __restrict__ q, int n_heads, dev_kv kv, dev_batch b, float qscale,
                      float* __restrict__ out, int slots_per_head) {
  constexpr int HD = C::HD, WM = C::WM, BN = C::BN, BM = C::BM, CPR = C::CPR, RPP = C::RPP, NP = C::NP;
  __shared__ __align__(128) __half ks[2][BN * HD];
  __shared__ __align__(128) __half vs[2][BN * HD];
  __shared__ int slot_tab[2][BN];

  const int n_kv = kv.n_kv_heads, G = n_heads / n_kv;
  const int kvh = static_cast<int>(blockIdx.x % static_cast<unsigned>(n_kv));
  const int T = slots_per_head - 1 - static_cast<int>(blockIdx.x / static_cast<unsigned>(n_kv));
  auto base_of = [&](int s) { return static_cast<int>(int64_t{b.query_start[s]} * G / BM) + s; };
  int lo = 0, hi = b.n_seqs - 1;  // the last sequence whose first slot is <= T
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (base_of(mid) <= T) lo = mid; else hi = mid - 1;
  }
  const int s = lo;
  const int q0 = b.query_start[s], n_new = b.query_start[s + 1] - q0;
  const int rows = n_new * G;             // packed rows of this sequence
  const int j0 = (T - base_of(s)) * BM;   // first packed row of this block
  if (j0 < 0 || j0 >= rows) return;       // an idle slot (whole block: before any barrier)
  const int ctx0 = b.seq_lens[s] - n_new;  // position of the chunk's first token
  const int max_pos = ctx0 + (min(j0 + BM, rows) - 1) / G;
  const int n_tiles = max_pos / BN + 1;

  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, qd = (lane & 3) * 2;  // mma fragment row / column pair

  // This warp's rows: [wj, wj + 16*WM); rows past the sequence compute as its last row.
  const int wj = j0 + warp * 16 * WM;
  const bool warp_live = wj < rows;
  const int warp_min_pos = ctx0 + min(wj, rows - 1) / G;
  const int warp_max_pos = ctx0 + min(wj + 16 * WM - 1, rows - 1) / G;
  int pos[WM][2];
  uint32_t qa[WM][HD / 16][4];
#pragma unroll
  for (int mi = 0; mi < WM; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      const int j = min(wj + mi * 16 + h * 8 + g, rows - 1);
      const int tok = j / G, head = kvh * G + (j - tok * G);
      pos[mi][h] = ctx0 + tok;
      const float* qrow = q + (int64_t{q0 + tok} * n_heads + head) * HD + qd;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
        const float2 x0 = *reinterpret_cast<const float2*>(qrow + kk * 16);
        const float2 x1 = *reinterpret_cast<const float2*>(qrow + kk * 16 + 8);
        qa[mi][kk][h] = pack_half2(x0.x * qscale, x0.y * qscale);
        qa[mi][kk][h + 2] = pack_half2(x1.x * qscale, x1.y * qscale);
      }
    }
  }

  const int ps = kv.page_size;
  const int64_t ts = int64_t{kv.n_kv_heads} * HD;
  const int32_t* ptab = b.page_table + int64_t{s} * b.max_pages;
  auto fill_slots = [&](int buf, int tile) {
    if (tid < BN) {
      const int t = tile * BN + tid;
      int slot = -1;
      if (t <= max_pos && t / ps < b.max_pages) {
        const int page = ptab[t / ps];
        if (page >= 0 && page < kv.n_pages) slot = page * ps + t % ps;
      }
      slot_tab[buf][tid] = slot;
    }
  };
  // Tile loads: pass p, key p*RPP + lrow, 8 elements at lchunk*8 (one 16-byte f16 chunk).
  const int lrow = tid / CPR, lchunk = tid % CPR;
  chunk8<E> pre[NP];  // one tile's K or V rows in flight
  auto load_rows = [&](const void* pool, int buf) {
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const int slot = slot_tab[buf][p * RPP + lrow];
      if (slot >= 0) pre[p].load(static_cast<const detail::kv_t<E>*>(pool) + slot * ts + kvh * HD + lchunk * 8);
      else pre[p].zero();
    }
  };
  // Swizzle: 16-byte chunk c of row r sits at chunk c ^ (r & 7) (conflict-free ldmatrix).
  auto store_rows = [&](__half* tile) {
#pragma unroll
    for (int p = 0; p < NP; ++p) {
      const int r = p * RPP + lrow;
      *reinterpret_cast<uint4*>(tile + r * HD + ((lchunk ^ (r & 7)) * 8)) = pre[p].to_f16();
    }
  };

  // Prologue: tile 0 into buffer 0, slot table of tile 1.
  fill_slots(0, 0);
  __syncthreads();
  load_rows(kv.k, 0);
  store_rows(ks[0]);
  load_rows(kv.v, 0);
  store_rows(vs[0]);
  fill_slots(1, 1);
  __syncthreads();

  float o[WM][HD / 8][4];
  float m[WM][2], l[WM][2];
#pragma unroll
  for (int mi = 0; mi < WM; ++mi) {
#pragma unroll
    for (int i = 0; i < HD / 8; ++i) o[mi][i][0] = o[mi][i][1] = o[mi][i][2] = o[mi][i][3] = 0.0f;
    m[mi][0] = m[mi][1] = -INFINITY;
    l[mi][0] = l[mi][1] = 0.0f;
  }

  // ldmatrix lane addressing: matrix lane >> 3, row lane & 7 (== key & 7 of the row read).
  const int lm = lane >> 3, lr = lane & 7;
  const uint32_t ks0 = static_cast<uint32_t>(__cvta_generic_to_shared(&ks[0][0]));
  const uint32_t vs0 = static_cast<uint32_t>(__cvta_generic_to_shared(&vs[0][0]));
  constexpr uint32_t tile_bytes = BN * HD * 2;

  for (int jt = 0; jt < n_tiles; ++jt) {
    const int buf = jt & 1;
    const bool has_next = jt + 1 < n_tiles;
    // The next tile's K rows are in flight during S = Q K^T, its V rows during softmax and
    // P V; buffer buf^1 was last read in iteration jt-1, before its barrier.
    if (has_next) load_rows(kv.k, buf ^ 1);
    const int t0 = jt * BN;
    if (warp_live && t0 <= warp_max_pos) {
      // S = Q K^T: B fragments of keys [np*16, np*16+16) x dims [kk*16, kk*16+16).
      float sc[WM][BN / 8][4];
#pragma unroll
      for (int mi = 0; mi < WM; ++mi)
#pragma unroll
        for (int nt = 0; nt < BN / 8; ++nt) sc[mi][nt][0] = sc[mi][nt][1] = sc[mi][nt][2] = sc[mi][nt][3] = 0.0f;
#pragma unroll
      for (int kk = 0; kk < HD / 16; ++kk) {
#pragma unroll
        for (int np = 0; np < BN / 16; ++np) {
          const int key = np * 16 + lr + (lm >> 1) * 8, chunk = kk * 2 + (lm & 1);
          uint32_t b0, b1, b2, b3;
          ldsm_x4(ks0 + buf * tile_bytes + (key * HD + ((chunk ^ lr) * 8)) * 2, b0, b1, b2, b3);
#pragma unroll
          for (int mi = 0; mi < WM; ++mi) {
            mma_16816(sc[mi][2 * np], qa[mi][kk], b0, b1);
            mma_16816(sc[mi][2 * np + 1], qa[mi][kk], b2, b3);
          }
        }
      }
      if (has_next) {
        store_rows(ks[buf ^ 1]);
        load_rows(kv.v, buf ^ 1);
      }
      // Causal mask, only where the tile reaches past this warp's first row.
      if (t0 + BN - 1 > warp_min_pos) {
#pragma unroll
        for (int mi = 0; mi < WM; ++mi)
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt)
#pragma unroll
            for (int e = 0; e < 4; ++e)
              if (t0 + nt * 8 + qd + (e & 1) > pos[mi][e >> 1]) sc[mi][nt][e] = -INFINITY;
      }
      // Online softmax (base 2). Every row sees key 0 in tile 0, so m is finite after it.
#pragma unroll
      for (int mi = 0; mi < WM; ++mi) {
#pragma unroll
        for (int h = 0; h < 2; ++h) {
          float mx = m[mi][h];
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt) mx = fmaxf(mx, fmaxf(sc[mi][nt][2 * h], sc[mi][nt][2 * h + 1]));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
          mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
          const float corr = ex2(m[mi][h] - mx);
          m[mi][h] = mx;
          float sum = 0.0f;
#pragma unroll
          for (int nt = 0; nt < BN / 8; ++nt) {
            sc[mi][nt][2 * h] = ex2(sc[mi][nt][2 * h] - mx);
            sc[mi][nt][2 * h + 1] = ex2(sc[mi][nt][2 * h + 1] - mx);
            sum += sc[mi][nt][2 * h] + sc[mi][nt][2 * h + 1];
          }
          l[mi][h] = l[mi][h] * corr + sum;
#pragma unroll
          for (int dt = 0; dt < HD / 8; ++dt) {
            o[mi][dt][2 * h] *= corr;
            o[mi][dt][2 * h + 1] *= corr;
          }
        }
      }
      // O += P V: P's accumulator layout is the A fragment layout (keys [kk*16, kk*16+16)).
#pragma unroll
      for (int kk = 0; kk < BN / 16; ++kk) {
        uint32_t pa[WM][4];
#pragma unroll
        for (int mi = 0; mi < WM; ++mi) {
          pa[mi][0] = pack_half2(sc[mi][2 * kk][0], sc[mi][2 * kk][1]);
          pa[mi][1] = pack_half2(sc[mi][2 * kk][2], sc[mi][2 * kk][3]);
          pa[mi][2] = pack_half2(sc[mi][2 * kk + 1][0], sc[mi][2 * kk + 1][1]);
          pa[mi][3] = pack_half2(sc[mi][2 * kk + 1][2], sc[mi][2 * kk + 1][3]);
        }
#pragma unroll
        for (int dp = 0; dp < HD / 16; ++dp) {
          const int key = kk * 16 + lr + (lm & 1) * 8, chunk = dp * 2 + (lm >> 1);
          uint32_t b0, b1, b2, b3;
          ldsm_x4_t(vs0 + buf * tile_bytes + (key * HD + ((chunk ^ lr) * 8)) * 2, b0, b1, b2, b3);
#pragma unroll
          for (int mi = 0; mi < WM; ++mi) {
            mma_16816(o[mi][2 * dp], pa[mi], b0, b1);
            mma_16816(o[mi][2 * dp + 1], pa[mi], b2, b3);
          }
        }
      }
    } else if (has_next) {  // this warp has no math on this tile
      store_rows(ks[buf ^ 1]);
      load_rows(kv.v, buf ^ 1);
    }
    if (has_next) store_rows(vs[buf ^ 1]);
    fill_slots(buf, jt + 2);  // slot table buf was last read by this iteration's loads
    __syncthreads();
  }

  if (!warp_live) return;
#pragma unroll
  for (int mi = 0; mi < WM; ++mi) {
#pragma unroll
    for (int h = 0; h < 2; ++h) {
      float sum = l[mi][h];
      sum += __shfl_xor_sync(0xffffffffu, sum, 1);
      sum += __shfl_xor_sync(0xffffffffu, sum, 2);
      const int j = wj + mi * 16 + h * 8 + g;
      if (j >= rows) continue;
      const float inv = 1.0f / sum;
      const int tok = j / G, head = kvh * G + (j - tok * G);
      float* orow = out + (int64_t{q0 + tok} * n_heads + head) * HD + qd;
#pragma unroll
      for (int dt = 0; dt < HD / 8; ++dt)
        *reinterpret_cast<float2*>(orow + dt * 8) = make_float2(o[mi][dt][2 * h] * inv, o[mi][dt][2 * h + 1] * inv);
    }
  }
}

template <class C, kv_elem E>
void launch(const float* q, int n_heads, const dev_kv& kv, const dev_batch& b, float scale, float* out,
            cudaStream_t stream) {
  const int G = n_heads / kv.n_kv_heads;
  const int64_t slots = int64_t{b.n_tokens} * G / C::BM + b.n_seqs;
  const int64_t blocks = slots * kv.n_kv_heads;
  const float qscale = scale * 1.4426950408889634f;  // exp(x) = exp2(x * log2 e)
  fa_prefill_kernel<C, E><<<static_cast<unsigned>(blocks), C::THREADS, 0, stream>>>(
      q, n_heads, kv, b, qscale, out, static_cast<int>(slots));
}

}  // namespace

void attention_prefill_tc(const float* q, int n_heads, const dev_kv& kv, const dev_batch& b, float scale,
                          float* out, cudaStream_t stream) {
  if (b.n_tokens == 0 || b.n_seqs == 0) return;
  if (kv.head_dim != 64 && kv.head_dim != 128) return attention_prefill(q, n_heads, kv, b, scale, out, stream);
  detail::with_kv_elem(kv.type, [&](auto et) {
    constexpr kv_elem E = decltype(et)::value;
    if (kv.head_dim == 64) launch<cfg64, E>(q, n_heads, kv, b, scale, out, stream);
    else launch<cfg128, E>(q, n_heads, kv, b, scale, out, stream);
  });
}

}  // namespace tandem::cuda
