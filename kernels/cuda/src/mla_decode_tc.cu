// MLA decode attention (absorbed form) over the f32 latent cache on tensor cores, in the
// FlashMLA style: one block per (query row, group of 64 heads, split of the row's keys), all
// 64 heads in the block, so each latent row is read from global memory once per row and
// split; the splits are merged by a second launch. Shapes: rank 512 + rope 64 (GLM-5,
// DeepSeek-V3, Kimi-K2); any head count (groups of 64, the last padded with zero queries).
// mla_tc_layout.cuh has the shared-memory geometry.
//
// Three kernels do the same arithmetic and differ in how a tile of latent rows reaches
// shared memory (TANDEM_CUDA_MLA_TC_STAGE, read at every launch, picks one):
//   f16 (or unset)  mla_decode_tc16_kernel<3>: loads the tile into registers, rounds it to
//                   f16 there and stores f16, so shared memory holds and serves f16 only;
//                   three stages, two barriers a tile (described where it is defined);
//   f16s2           mla_decode_tc16_kernel<2>: the same over two stages, three barriers;
//   f32             mla_decode_tc_kernel, the first kernel (described here): cp.async of the
//                   f32 rows, rounded to f16 in shared memory; four barriers a tile.
// Their results are bit-identical (gpu_mla checks it); the f16 staging moves 9,984 bytes of
// shared-memory traffic a key against 14,592 (+384 of bank conflicts).
//
// mla_decode_tc_kernel, per block, 8 warps (256 threads, one block per SM: 231,680 bytes
// of shared memory and up to 255 registers, O alone is 128):
//  - prologue (before waiting for the previous kernel when the caller allows it: it reads
//    only what kernels two launches back wrote): the split's pool slots into a shared table
//    (dense: positions k0 ..; top-k: the sanitised list), the first tile's cp.async; then
//    q (the W_UK GEMM's output) as f16 A fragments, scaled by scale * log2(e), in shared
//    memory (Q is 64 x 576: 72 KB, too large for registers next to O);
//  - per tile of 32 keys (two f32 stages, the next tile's 73.7 KB in flight while one is
//    computed; four barriers a tile):
//      1. the landed f32 rows are rounded to f16 in place (see the layout);
//      2. S = Q K^T, m16n8k16 f16 -> f32: warp (mh, kq) computes heads 32 mh .. + 32 x the
//         32 keys over k-steps 9 kq .. 9 kq + 8 (Q fragments from shared memory, K by
//         ldmatrix); the four k-parts' partial scores go to the stage's holes;
//      3. online softmax in f32, base 2: warp (mh, rg) sums the four partials of its 8 rows
//         (fixed order: deterministic), masks keys past the split, takes the row max over
//         the tile (quad shuffles), rounds P to f16 and writes it as A fragments, and the
//         rows' correction factors to shared memory; each lane keeps its row's max and its
//         own part of the row sum (of the rounded P) in registers;
//      4. O = O * alpha + P V: warp w owns latent dims 64 w .. + 64 of all 64 heads (O: 128
//         f32 registers per thread), V by ldmatrix.trans from the same f16 tile.
//  - end: one split: o_lat = O / l; several: O, m and l of the split, merged by
//    mla_tc_merge_kernel (a block per (row, head)), launched with PDL and let go only when
//    every block of this grid is past its tiles.
//
// Resources (ptxas -v, nvcc 13.0), registers and spills; dynamic shared memory:
//   mla_decode_tc_kernel       sm_90a 255, no spills; sm_121a 255, none; 231,680 bytes (the
//                              S loop is unrolled by 3, not 9, for no spills)
//   mla_decode_tc16_kernel<3>  sm_90a 244, no spills; sm_121a 255, 32 B spilled; 231,680 bytes
//   mla_decode_tc16_kernel<2>  sm_90a 244, no spills; sm_121a 255, 12 B spilled; 194,816 bytes
//   mla_tc_merge_kernel        sm_90a 39, sm_121a 40, none; 4,224 bytes static
// (sm_121a, GB10, never launches them: its blocks get ~99 KB of shared memory.)
// mla_decode_tc_kernel: a host emulation
// of every thread's shared-memory traffic (ldmatrix / mma semantics as the PTX ISA states
// them, cp.async in flight until wait + barrier) found no race between barriers and no bank
// conflict on the 16-byte accesses (the P fragments' 4-byte stores are 4-way).
//
// Shared-memory traffic per key (the limit, not the tensor cores: ~70 k MAC per key at
// ~1,000+ MAC per clock): cp.async 2.3 KB, conversion 3.5 KB, Q fragments 2.3 KB, K 2.3 KB,
// partial scores 2 KB, P and V 2 KB: ~14.5 KB, ~115 cycles a key at 128 bytes a clock
// (mla_decode_tc16_kernel: ~9.8 KB, ~78 cycles; the itemised count is at that kernel).
//
// Precision: f16 operands (11-bit significand; the project's prefill kernel makes the same
// choice over bf16), f32 accumulation and softmax. Latent values, q * scale * log2(e) and P
// are rounded once each to f16 (relative 2^-11), saturating at +-65504 (latent or scaled
// query entries beyond that would be clipped; activations are orders of magnitude below).
// Expected output error ~5e-4 of the output's norm against the f32 reference.
#include <cuda_fp16.h>

#include <algorithm>
#include <climits>
#include <cmath>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "mla_common.cuh"
#include "mla_tc_layout.cuh"

namespace tandem::cuda {
namespace {

namespace L = mla_tc;

struct tc_args {
  const float* qcat;  // [n, heads, 576]: absorbed q, rotated q_rope
  int heads;
  key_cache kc;
  row_batch b;
  const row_info* rinfo;
  const int32_t* list;   // sanitised top-k lists [n, list_stride] or null (dense)
  const int32_t* count;  // their lengths
  int64_t list_stride;
  float qscale;          // softmax scale * log2(e)
  int chunk, splits;     // keys per split (a multiple of 32, <= max_chunk), splits per row
  int early;             // the prologue may run before griddepcontrol.wait
  int prefetch;          // mla_decode_tc16_kernel: prefetch rows into L2 a tile ahead of the loads
  float* part_acc;       // splits > 1: [n, heads, splits, 512] unnormalised O
  float* part_ml;        // splits > 1: [n, heads, splits, 2]: row max (log2 units), row sum
  float* o_lat;          // splits == 1: [n, heads, 512]
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

// f16 pair (lo in the low half), saturated to the finite range.
__device__ __forceinline__ uint32_t pack_h2(float lo, float hi) {
  lo = fminf(fmaxf(lo, -65504.0f), 65504.0f);
  hi = fminf(fmaxf(hi, -65504.0f), 65504.0f);
  const __half2 h = __floats2half2_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&h);
}

__device__ __forceinline__ float ex2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}

__device__ __forceinline__ void mma_16816(float (&c)[4], const uint4& a, uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a.x), "r"(a.y), "r"(a.z), "r"(a.w), "r"(b0), "r"(b1));
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

__device__ __forceinline__ uint4 lds128(uint32_t addr) {
  uint4 v;
  asm volatile("ld.shared.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ float4 lds128f(uint32_t addr) {
  float4 v;
  asm volatile("ld.shared.v4.f32 {%0,%1,%2,%3}, [%4];" : "=f"(v.x), "=f"(v.y), "=f"(v.z), "=f"(v.w) : "r"(addr));
  return v;
}
__device__ __forceinline__ void sts128(uint32_t addr, uint4 v) {
  asm volatile("st.shared.v4.u32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w)
               : "memory");
}
__device__ __forceinline__ void sts128f(uint32_t addr, float4 v) {
  asm volatile("st.shared.v4.f32 [%0], {%1,%2,%3,%4};" ::"r"(addr), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}
__device__ __forceinline__ void sts32(uint32_t addr, uint32_t v) {
  asm volatile("st.shared.u32 [%0], %1;" ::"r"(addr), "r"(v) : "memory");
}

__device__ __forceinline__ void cp_async16(uint32_t dst, const void* src, bool valid) {
  const int n = valid ? 16 : 0;  // 0: zero-filled, nothing read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(src), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_group 0;" ::: "memory"); }

__global__ void __launch_bounds__(L::threads, 1) mla_decode_tc_kernel(tc_args a) {
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sbase = smem_addr(smem);
  const uint32_t qf = sbase + L::off_qfrag;
  float* alpha_s = reinterpret_cast<float*>(smem + L::off_alpha);  // [64]: this tile's corrections
  auto* slots = reinterpret_cast<int32_t*>(smem + L::off_slots);   // [chunk]

  const int r = static_cast<int>(blockIdx.x / static_cast<unsigned>(a.splits));
  const int split = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.splits));
  const int h0 = static_cast<int>(blockIdx.y) * L::heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;

  if (!a.early) detail::pdl_wait();
  const row_info ri = a.rinfo[r];
  const int n_keys = a.list != nullptr ? a.count[r] : ri.last + 1;
  const int k0 = split * a.chunk;
  if (k0 >= n_keys) {  // an empty split (whole block, before any barrier)
    if (a.splits == 1) {  // no keys at all: zeros (n_keys <= 0)
      detail::pdl_wait();
      for (int i = tid; i < L::heads * L::rank; i += L::threads) {
        const int h = h0 + i / L::rank;
        if (h < a.heads) a.o_lat[(int64_t{r} * a.heads + h) * L::rank + i % L::rank] = 0.0f;
      }
    }
    return;
  }
  const int nk = min(n_keys - k0, a.chunk), n_tiles = (nk + L::keys - 1) / L::keys;

  // The split's pool slots, clamped into the pool like every MLA kernel (detail::slot_of),
  // each thread's loads issued together: one round trip for the positions, one for pages.
  {
    constexpr int per = L::max_chunk / L::threads;
    const int32_t* lst = a.list != nullptr ? a.list + r * a.list_stride + k0 : nullptr;
    const int32_t* ptab = a.b.page_table + int64_t{ri.seq} * a.b.max_pages;
    int pos[per];
#pragma unroll
    for (int i = 0; i < per; ++i) {
      const int j = tid + L::threads * i;
      pos[i] = j < nk ? (lst != nullptr ? lst[j] : k0 + j) : 0;
    }
    int32_t page[per];
#pragma unroll
    for (int i = 0; i < per; ++i) {
      const int j = tid + L::threads * i;
      page[i] = j < nk ? ptab[min(pos[i] / a.kc.page_size, a.b.max_pages - 1)] : 0;
    }
#pragma unroll
    for (int i = 0; i < per; ++i) {
      const int j = tid + L::threads * i;
      const int32_t pg = min(max(page[i], 0), static_cast<int32_t>(a.kc.n_pages - 1));
      if (j < nk) slots[j] = pg * a.kc.page_size + pos[i] % a.kc.page_size;
    }
  }
  __syncthreads();

  // Tile it into stage it & 1: row copy_row(tid), zero-filled past the split.
  const int crow = L::copy_row(tid);
  auto issue = [&](int it) {
    const uint32_t st = sbase + (it & 1) * L::stage_bytes;
    const int j = it * L::keys + crow;
    const bool ok = j < nk;
    const float* src = a.kc.k + (ok ? int64_t{slots[j]} * L::dim : 0);
#pragma unroll
    for (int i = 0; i < L::copies_per_thread; ++i) {
      const int c = L::copy_chunk(tid, i);
      cp_async16(st + L::f32_off(crow, c), src + 4 * c, ok);
    }
    cp_async_commit();
  };
  issue(0);

  if (a.early) detail::pdl_wait();  // qcat comes from the previous kernel

  // Q as A fragments: unit u = (m tile, k-step, lane), registers (row g, cols 2t..),
  // (g + 8, 2t..), (g, 2t + 8..), (g + 8, 2t + 8..); heads past the op's are zero.
  {
    const float* qrow = a.qcat + int64_t{r} * a.heads * L::dim;
    constexpr int units = 4 * L::ksteps * 32, per = units / L::threads;  // 18
#pragma unroll 6
    for (int i = 0; i < per; ++i) {
      const int u = tid + L::threads * i;
      const int ln = u & 31, mks = u >> 5, mt = mks / L::ksteps, ks = mks % L::ksteps;
      const int row0 = 16 * mt + (ln >> 2), col = 16 * ks + 2 * (ln & 3);
      float2 x[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = h0 + row0 + 8 * (e & 1);
        x[e] = h < a.heads ? *reinterpret_cast<const float2*>(qrow + int64_t{h} * L::dim + col + 8 * (e >> 1))
                           : make_float2(0.0f, 0.0f);
      }
      sts128(qf + 16 * u, make_uint4(pack_h2(x[0].x * a.qscale, x[0].y * a.qscale),
                                     pack_h2(x[1].x * a.qscale, x[1].y * a.qscale),
                                     pack_h2(x[2].x * a.qscale, x[2].y * a.qscale),
                                     pack_h2(x[3].x * a.qscale, x[3].y * a.qscale)));
    }
  }

  float o[4][8][4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int n = 0; n < 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  // Softmax role: warp (mh, rg) owns rows 32 mh + 16 (rg >> 1) + 8 (rg & 1) + g; its four
  // lanes t of a row keep the row max and their part of the row sum.
  const int mh = warp & 1, part = warp >> 1;  // S: k part; softmax: row group
  const int mt_s = 2 * mh + (part >> 1), hi_s = part & 1;
  const int row_s = 16 * mt_s + 8 * hi_s + g;
  float m_run = -INFINITY, l_run = 0.0f;

  for (int it = 0; it < n_tiles; ++it) {
    const uint32_t st = sbase + (it & 1) * L::stage_bytes;
    cp_async_wait_all();
    __syncthreads();  // tile it landed for everyone; the previous tile's readers are done
    if (it + 1 < n_tiles) issue(it + 1);

    // 1. f32 -> f16 in place: task (r, k) reads f32 chunks 2k, 2k+1 and writes f16 chunk k
    //    over chunk 2k (its own read).
#pragma unroll 3
    for (int i = 0; i < L::converts_per_thread; ++i) {
      int rr = 0, k = 0;
      L::convert_task(tid + L::threads * i, rr, k);
      const float4 x = lds128f(st + L::f32_off(rr, 2 * k)), y = lds128f(st + L::f32_off(rr, 2 * k + 1));
      sts128(st + L::f16_off(rr, k), make_uint4(pack_h2(x.x, x.y), pack_h2(x.z, x.w), pack_h2(y.x, y.y),
                                                pack_h2(y.z, y.w)));
    }
    __syncthreads();

    // 2. Partial S over k-steps 9 part .. of heads 32 mh .. (2 m tiles) x 32 keys (4 n tiles).
    {
      float sc[2][4][4];
#pragma unroll
      for (int ml = 0; ml < 2; ++ml)
#pragma unroll
        for (int nt = 0; nt < 4; ++nt) sc[ml][nt][0] = sc[ml][nt][1] = sc[ml][nt][2] = sc[ml][nt][3] = 0.0f;
#pragma unroll 3  // full unrolling keeps 9 k-steps of addresses live: ptxas spills next to O
      for (int kk = 0; kk < L::ks_per_part; ++kk) {
        const int ks = L::ks_per_part * part + kk;
        const uint4 qa0 = lds128(qf + L::qfrag_off(2 * mh, ks, lane));
        const uint4 qa1 = lds128(qf + L::qfrag_off(2 * mh + 1, ks, lane));
#pragma unroll
        for (int np = 0; np < 2; ++np) {
          uint32_t b0, b1, b2, b3;
          ldsm_x4(st + L::qk_ldsm_off(lane, np, ks), b0, b1, b2, b3);
          mma_16816(sc[0][2 * np], qa0, b0, b1);
          mma_16816(sc[0][2 * np + 1], qa0, b2, b3);
          mma_16816(sc[1][2 * np], qa1, b0, b1);
          mma_16816(sc[1][2 * np + 1], qa1, b2, b3);
        }
      }
#pragma unroll
      for (int ml = 0; ml < 2; ++ml)
#pragma unroll
        for (int hr = 0; hr < 2; ++hr)
#pragma unroll
          for (int q = 0; q < 2; ++q)
            sts128f(st + L::hole_off(L::sp_hole(part, mh, 2 * ml + hr, q, lane)),
                    make_float4(sc[ml][2 * q][2 * hr], sc[ml][2 * q][2 * hr + 1], sc[ml][2 * q + 1][2 * hr],
                                sc[ml][2 * q + 1][2 * hr + 1]));
    }
    __syncthreads();

    // 3. Softmax of rows row_s: v[2 nt + j] is key 8 nt + 2 t + j of the tile.
    {
      float v[8];
#pragma unroll
      for (int q = 0; q < 2; ++q) {
        float4 s = lds128f(st + L::hole_off(L::sp_hole(0, mh, part, q, lane)));
#pragma unroll
        for (int kq = 1; kq < L::kparts; ++kq) {
          const float4 y = lds128f(st + L::hole_off(L::sp_hole(kq, mh, part, q, lane)));
          s.x += y.x, s.y += y.y, s.z += y.z, s.w += y.w;
        }
        v[4 * q] = s.x, v[4 * q + 1] = s.y, v[4 * q + 2] = s.z, v[4 * q + 3] = s.w;
      }
      const int left = nk - it * L::keys;  // valid keys of this tile (>= 1)
      float mx = -INFINITY;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        if (8 * (e >> 1) + 2 * t + (e & 1) >= left) v[e] = -INFINITY;
        mx = fmaxf(mx, v[e]);
      }
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
      mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
      const float m_new = fmaxf(m_run, mx);  // finite: every tile has a key
      const float alpha = ex2(m_run - m_new);
      m_run = m_new;
      float sum = 0.0f;
#pragma unroll
      for (int nt = 0; nt < 4; ++nt) {
        const __half2 p = __floats2half2_rn(ex2(v[2 * nt] - m_new), ex2(v[2 * nt + 1] - m_new));
        const float2 pf = __half22float2(p);
        sum += pf.x + pf.y;
        sts32(st + L::hole_off(L::pf_hole(mt_s, nt >> 1, lane)) + 4 * (hi_s + 2 * (nt & 1)),
              *reinterpret_cast<const uint32_t*>(&p));
      }
      l_run = l_run * alpha + sum;
      if (t == 0) alpha_s[row_s] = alpha;
    }
    __syncthreads();

    // 4. O = O * alpha + P V over latent dims 64 warp ..
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float al = alpha_s[16 * mt + 8 * hr + g];
#pragma unroll
        for (int n = 0; n < 8; ++n) o[mt][n][2 * hr] *= al, o[mt][n][2 * hr + 1] *= al;
      }
    }
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {
      uint4 pa[4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) pa[mt] = lds128(st + L::hole_off(L::pf_hole(mt, kp, lane)));
#pragma unroll
      for (int dp = 0; dp < 4; ++dp) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(st + L::pv_ldsm_off(lane, kp, warp, dp), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          mma_16816(o[mt][2 * dp], pa[mt], b0, b1);
          mma_16816(o[mt][2 * dp + 1], pa[mt], b2, b3);
        }
      }
    }
  }

  // The merge may launch once every block is here (not earlier: its blocks would take the
  // SMs of this grid's later waves while they wait).
  detail::pdl_trigger();

  // Row sums and maxima to shared memory (the stages are free now), then the outputs.
  float* l_s = reinterpret_cast<float*>(smem);
  float* m_s = l_s + L::heads;
  {
    float l = l_run;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    __syncthreads();  // every warp is past its last P V (stage 0 may have been its source)
    if (t == 0) l_s[row_s] = l, m_s[row_s] = m_run;
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = 16 * mt + 8 * hr + g, h = h0 + row;
      if (h >= a.heads) continue;
      const int64_t rh = int64_t{r} * a.heads + h;
      const int d0 = 64 * warp + 2 * t;
      if (a.splits == 1) {
        const float inv = 1.0f / l_s[row];
        float* dst = a.o_lat + rh * L::rank + d0;
#pragma unroll
        for (int n = 0; n < 8; ++n)
          *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o[mt][n][2 * hr] * inv, o[mt][n][2 * hr + 1] * inv);
      } else {
        const int64_t ps = rh * a.splits + split;
        float* dst = a.part_acc + ps * L::rank + d0;
#pragma unroll
        for (int n = 0; n < 8; ++n)
          *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o[mt][n][2 * hr], o[mt][n][2 * hr + 1]);
        if (warp == 0 && t == 0) *reinterpret_cast<float2*>(a.part_ml + 2 * ps) = make_float2(m_s[row], l_s[row]);
      }
    }
  }
}

// ---- f16 staging (the default): the same work as mla_decode_tc_kernel above, but each tile
// goes global -> registers (f32) -> f16 -> shared memory, so shared memory holds and serves
// only f16 (layout: mla_tc::s16). Per thread, 18 float4 loads a tile (two rows, 64 floats of
// a row per load and half-warp); a load past the split's keys is not issued: zeros. The rows
// are prefetched into L2 a tile before their register loads (one bulk prefetch a row), so
// those find them in L2 and have a whole phase or two to arrive.
//
// mla_decode_tc16_kernel<3> (the default), three stages, two barriers a tile:
//      S(it) (the tile's stage, Q) -> partial scores; loads 12 .. 17 of tile it + 1 stored
//   B  softmax(it) -> P, corrections; meanwhile tile it + 3 prefetched, loads 0 .. 11 of
//      tile it + 2 issued
//   C  P V(it); loads 0 .. 11 of tile it + 2 stored, 12 .. 17 issued; then at once S(it + 1)
//      (its stage was complete at B(it)): a warp's P V and the next S need no barrier
//      between them, as tile it + 2's stage was last read by P V(it - 1), before B(it).
// mla_decode_tc16_kernel<2> (TANDEM_CUDA_MLA_TC_STAGE=f16s2), two stages, three barriers:
//   A  (tile it in its stage; the other stage free) tile it + 2 prefetched, loads 0 .. 5 of
//      tile it + 1 issued; S(it); loads 0 .. 5 stored, 6 .. 17 issued
//   B  softmax(it)
//   C  P V(it); loads 6 .. 17 stored.
// Registers in flight: 6 loads (24 registers) over S, next to O's 128 and S's 32
// accumulators; 12 (48) over softmax and P V. The loads are plain ld.global
// (L1::no_allocate), not .nc: ptxas may sink a non-coherent load past a bar.sync, and did
// (a batch issued before a barrier landed after it, with less time to arrive).
//
// Shared-memory traffic per key, bytes (the f32-staging kernel's in brackets): tile stores
// 1152 [cp.async 2304 + conversion 2304 read + 1152 write], Q fragments 2304 [2304], K by
// ldmatrix 2304 [2304], partial scores 1024 + 1024 [same], P 128 written (8-byte stores,
// conflict-free; [4-byte stores, 4-way: 512 in bank cycles]) + 1024 read [1024], V 1024
// [1024]: 9,984 [14,592 + 384 of conflicts], -32%. Rounding: the same f16 values
// (cvt.rn.satfinite = the old clamp and round for every non-NaN input; a NaN stays NaN
// instead of becoming -65504), the same mma chains in the same order: the results are
// bit-identical to mla_decode_tc_kernel's (gpu_mla checks it).
//
// Resources: 244 registers (sm_90a; 255 on sm_121a), no spills; 231,680 bytes of dynamic
// shared memory (<3>), 194,816 (<2>); the file's header lists all kernels.
// tests/cpu/test_mla_tc_layout.cpp (suite unit) replays every thread's shared-memory
// traffic over three tiles on the host, in either kernel's order of phases and barriers,
// with this file's index functions and the PTX ISA's ldmatrix / mma fragment semantics: S,
// P V, the stores' coverage, no race between barriers, and every warp-wide access at the
// fewest wavefronts its width allows.
namespace S = mla_tc::s16;

// 16 bytes of f32 from global memory into registers (bits), or zeros when !ok (nothing read).
// Not kept in L1 (the rows are read once).
__device__ __forceinline__ uint4 ldg_row16(const float* p, bool ok) {
  uint4 v;
  asm volatile(
      "{\n\t.reg .pred p;\n\tsetp.ne.b32 p, %5, 0;\n\tmov.b32 %0, 0;\n\tmov.b32 %1, 0;\n\tmov.b32 %2, 0;\n\t"
      "mov.b32 %3, 0;\n\t@p ld.global.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];\n\t}"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p), "r"(ok ? 1 : 0));
  return v;
}
// f16 pair (lo in the low half), round to nearest, saturated to +-65504 (pack_h2's values).
__device__ __forceinline__ uint32_t cvt_h2(uint32_t lo, uint32_t hi) {
  uint32_t r;
  asm("cvt.rn.satfinite.f16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(__uint_as_float(hi)), "f"(__uint_as_float(lo)));
  return r;
}
__device__ __forceinline__ void sts64(uint32_t addr, uint32_t x, uint32_t y) {
  asm volatile("st.shared.v2.u32 [%0], {%1,%2};" ::"r"(addr), "r"(x), "r"(y) : "memory");
}
__device__ __forceinline__ void prefetch_l2(const void* p, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p), "r"(bytes) : "memory");
}

// S over the stage at st: partial scores of k-steps 9 part .. of heads 32 mh .. x 32 keys,
// to the region at sp.
__device__ __forceinline__ void tc16_s_phase(uint32_t st, uint32_t qf, uint32_t sp, int mh, int part, int lane) {
  float sc[2][4][4];
#pragma unroll
  for (int ml = 0; ml < 2; ++ml)
#pragma unroll
    for (int nt = 0; nt < 4; ++nt) sc[ml][nt][0] = sc[ml][nt][1] = sc[ml][nt][2] = sc[ml][nt][3] = 0.0f;
#pragma unroll 3
  for (int kk = 0; kk < L::ks_per_part; ++kk) {
    const int ks = L::ks_per_part * part + kk;
    const uint4 qa0 = lds128(qf + L::qfrag_off(2 * mh, ks, lane));
    const uint4 qa1 = lds128(qf + L::qfrag_off(2 * mh + 1, ks, lane));
#pragma unroll
    for (int np = 0; np < 2; ++np) {
      uint32_t b0, b1, b2, b3;
      ldsm_x4(st + S::qk_ldsm_off(lane, np, ks), b0, b1, b2, b3);
      mma_16816(sc[0][2 * np], qa0, b0, b1);
      mma_16816(sc[0][2 * np + 1], qa0, b2, b3);
      mma_16816(sc[1][2 * np], qa1, b0, b1);
      mma_16816(sc[1][2 * np + 1], qa1, b2, b3);
    }
  }
#pragma unroll
  for (int ml = 0; ml < 2; ++ml)
#pragma unroll
    for (int hr = 0; hr < 2; ++hr)
#pragma unroll
      for (int q = 0; q < 2; ++q)
        sts128f(sp + S::sp_off(L::sp_hole(part, mh, 2 * ml + hr, q, lane)),
                make_float4(sc[ml][2 * q][2 * hr], sc[ml][2 * q][2 * hr + 1], sc[ml][2 * q + 1][2 * hr],
                            sc[ml][2 * q + 1][2 * hr + 1]));
}

template <int kStages>
__global__ void __launch_bounds__(L::threads, 1) mla_decode_tc16_kernel(tc_args a) {
  static_assert(kStages == 2 || kStages == 3);
  using R = S::regions<kStages>;
  extern __shared__ __align__(128) unsigned char smem[];
  const uint32_t sbase = smem_addr(smem);
  const uint32_t qf = sbase + R::off_qfrag;
  float* alpha_s = reinterpret_cast<float*>(smem + R::off_alpha);  // [64]: this tile's corrections
  auto* slots = reinterpret_cast<int32_t*>(smem + R::off_slots);   // [chunk]

  const int r = static_cast<int>(blockIdx.x / static_cast<unsigned>(a.splits));
  const int split = static_cast<int>(blockIdx.x % static_cast<unsigned>(a.splits));
  const int h0 = static_cast<int>(blockIdx.y) * L::heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int g = lane >> 2, t = lane & 3;

  if (!a.early) detail::pdl_wait();
  const row_info ri = a.rinfo[r];
  const int n_keys = a.list != nullptr ? a.count[r] : ri.last + 1;
  const int k0 = split * a.chunk;
  if (k0 >= n_keys) {  // an empty split (whole block, before any barrier)
    if (a.splits == 1) {  // no keys at all: zeros (n_keys <= 0)
      detail::pdl_wait();
      for (int i = tid; i < L::heads * L::rank; i += L::threads) {
        const int h = h0 + i / L::rank;
        if (h < a.heads) a.o_lat[(int64_t{r} * a.heads + h) * L::rank + i % L::rank] = 0.0f;
      }
    }
    return;
  }
  const int nk = min(n_keys - k0, a.chunk), n_tiles = (nk + L::keys - 1) / L::keys;

  // The split's pool slots (as mla_decode_tc_kernel).
  {
    constexpr int per = L::max_chunk / L::threads;
    const int32_t* lst = a.list != nullptr ? a.list + r * a.list_stride + k0 : nullptr;
    const int32_t* ptab = a.b.page_table + int64_t{ri.seq} * a.b.max_pages;
    int pos[per];
#pragma unroll
    for (int i = 0; i < per; ++i) {
      const int j = tid + L::threads * i;
      pos[i] = j < nk ? (lst != nullptr ? lst[j] : k0 + j) : 0;
    }
    int32_t page[per];
#pragma unroll
    for (int i = 0; i < per; ++i) {
      const int j = tid + L::threads * i;
      page[i] = j < nk ? ptab[min(pos[i] / a.kc.page_size, a.b.max_pages - 1)] : 0;
    }
#pragma unroll
    for (int i = 0; i < per; ++i) {
      const int j = tid + L::threads * i;
      const int32_t pg = min(max(page[i], 0), static_cast<int32_t>(a.kc.n_pages - 1));
      if (j < nk) slots[j] = pg * a.kc.page_size + pos[i] % a.kc.page_size;
    }
  }
  __syncthreads();

  // Tile tt's rows into L2: lanes 0 .. 3 of each warp, a row each (2304 bytes).
  auto prefetch_tile = [&](int tt) {
    const int j = tt * L::keys + S::prefetch_row(warp, lane);
    if (a.prefetch != 0 && lane < 4 && j < nk) prefetch_l2(a.kc.k + int64_t{slots[j]} * L::dim, L::row_bytes);
  };
  // This thread's loads: rows load_row(tid, 0 / 1) of a tile, floats 4 (tid & 15) + 64 m.
  const uint32_t ldst = static_cast<uint32_t>(S::load_dst_base(tid));
  const float* kcol = a.kc.k + S::load_col(tid, 0);
  uint4 ld[S::loads];
  auto load_tile = [&](int tt, auto first, auto last) {  // loads [first, last) of tile tt
    const int j0 = tt * L::keys + S::load_row(tid, 0), j1 = tt * L::keys + S::load_row(tid, 1);
    const bool ok0 = j0 < nk, ok1 = j1 < nk;
    const float* src0 = kcol + (ok0 ? int64_t{slots[j0]} * L::dim : 0);
    const float* src1 = kcol + (ok1 ? int64_t{slots[j1]} * L::dim : 0);
#pragma unroll
    for (int i = decltype(first)::value; i < decltype(last)::value; ++i)
      ld[i] = ldg_row16(((i & 1) != 0 ? src1 : src0) + 64 * (i >> 1), (i & 1) != 0 ? ok1 : ok0);
  };
  auto store_tile = [&](int tt, auto first, auto last) {  // rounds and stores loads [first, last)
    const uint32_t dst = sbase + R::stage_off(tt) + ldst;
#pragma unroll
    for (int i = decltype(first)::value; i < decltype(last)::value; ++i)
      sts64(dst + S::load_dst_step(i), cvt_h2(ld[i].x, ld[i].y), cvt_h2(ld[i].z, ld[i].w));
  };
  // <2>: [0, 6) over S, [6, 18) over softmax and P V; <3>: [0, 12) over softmax and P V,
  // [12, 18) over S.
  using c0 = std::integral_constant<int, 0>;
  using c_mid = std::integral_constant<int, kStages == 2 ? S::loads_s : S::loads - S::loads_s>;
  using c_end = std::integral_constant<int, S::loads>;

  // Prologue: tile 0 straight from global memory (its load overlaps Q's), <3> also the first
  // part of tile 1, and its second part in flight into S(0).
  prefetch_tile(1);
  if constexpr (kStages == 3) prefetch_tile(2);
  load_tile(0, c0{}, c_end{});

  if (a.early) detail::pdl_wait();  // qcat comes from the previous kernel

  // Q as A fragments (as mla_decode_tc_kernel).
  {
    const float* qrow = a.qcat + int64_t{r} * a.heads * L::dim;
    constexpr int units = 4 * L::ksteps * 32, per = units / L::threads;  // 18
#pragma unroll 6
    for (int i = 0; i < per; ++i) {
      const int u = tid + L::threads * i;
      const int ln = u & 31, mks = u >> 5, mt = mks / L::ksteps, ks = mks % L::ksteps;
      const int row0 = 16 * mt + (ln >> 2), col = 16 * ks + 2 * (ln & 3);
      float2 x[4];
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int h = h0 + row0 + 8 * (e & 1);
        x[e] = h < a.heads ? *reinterpret_cast<const float2*>(qrow + int64_t{h} * L::dim + col + 8 * (e >> 1))
                           : make_float2(0.0f, 0.0f);
      }
      sts128(qf + 16 * u, make_uint4(pack_h2(x[0].x * a.qscale, x[0].y * a.qscale),
                                     pack_h2(x[1].x * a.qscale, x[1].y * a.qscale),
                                     pack_h2(x[2].x * a.qscale, x[2].y * a.qscale),
                                     pack_h2(x[3].x * a.qscale, x[3].y * a.qscale)));
    }
  }
  store_tile(0, c0{}, c_end{});

  float o[4][8][4];
#pragma unroll
  for (int mt = 0; mt < 4; ++mt)
#pragma unroll
    for (int n = 0; n < 8; ++n) o[mt][n][0] = o[mt][n][1] = o[mt][n][2] = o[mt][n][3] = 0.0f;
  const int mh = warp & 1, part = warp >> 1;  // S: k part; softmax: row group
  const int mt_s = 2 * mh + (part >> 1), hi_s = part & 1;
  const int row_s = 16 * mt_s + 8 * hi_s + g;
  float m_run = -INFINITY, l_run = 0.0f;

  // Softmax of rows row_s over tile it: v[2 nt + j] is key 8 nt + 2 t + j of the tile.
  auto softmax_phase = [&](int it) {
    float v[8];
#pragma unroll
    for (int q = 0; q < 2; ++q) {
      float4 s = lds128f(sbase + R::off_sp + S::sp_off(L::sp_hole(0, mh, part, q, lane)));
#pragma unroll
      for (int kq = 1; kq < L::kparts; ++kq) {
        const float4 y = lds128f(sbase + R::off_sp + S::sp_off(L::sp_hole(kq, mh, part, q, lane)));
        s.x += y.x, s.y += y.y, s.z += y.z, s.w += y.w;
      }
      v[4 * q] = s.x, v[4 * q + 1] = s.y, v[4 * q + 2] = s.z, v[4 * q + 3] = s.w;
    }
    const int left = nk - it * L::keys;  // valid keys of this tile (>= 1)
    float mx = -INFINITY;
#pragma unroll
    for (int e = 0; e < 8; ++e) {
      if (8 * (e >> 1) + 2 * t + (e & 1) >= left) v[e] = -INFINITY;
      mx = fmaxf(mx, v[e]);
    }
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 1));
    mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, 2));
    const float m_new = fmaxf(m_run, mx);  // finite: every tile has a key
    const float alpha = ex2(m_run - m_new);
    m_run = m_new;
    float sum = 0.0f;
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {  // n tiles 2 kp (a_hi) and 2 kp + 1 (a_hi+2), as nt = 0 .. 3
      const __half2 p0 = __floats2half2_rn(ex2(v[4 * kp] - m_new), ex2(v[4 * kp + 1] - m_new));
      const float2 f0 = __half22float2(p0);
      sum += f0.x + f0.y;
      const __half2 p1 = __floats2half2_rn(ex2(v[4 * kp + 2] - m_new), ex2(v[4 * kp + 3] - m_new));
      const float2 f1 = __half22float2(p1);
      sum += f1.x + f1.y;
      sts64(sbase + R::off_pf + S::pf_off(mt_s, kp, lane) + S::pf_half(hi_s, lane),
            *reinterpret_cast<const uint32_t*>(&p0), *reinterpret_cast<const uint32_t*>(&p1));
    }
    l_run = l_run * alpha + sum;
    if (t == 0) alpha_s[row_s] = alpha;
  };
  // O = O * alpha + P V over latent dims 64 warp .., V from the stage at st.
  auto pv_phase = [&](uint32_t st) {
#pragma unroll
    for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
      for (int hr = 0; hr < 2; ++hr) {
        const float al = alpha_s[16 * mt + 8 * hr + g];
#pragma unroll
        for (int n = 0; n < 8; ++n) o[mt][n][2 * hr] *= al, o[mt][n][2 * hr + 1] *= al;
      }
    }
#pragma unroll
    for (int kp = 0; kp < 2; ++kp) {
      uint4 pa[4];
#pragma unroll
      for (int mt = 0; mt < 4; ++mt) pa[mt] = S::pf_regs(lds128(sbase + R::off_pf + S::pf_off(mt, kp, lane)), lane);
#pragma unroll
      for (int dp = 0; dp < 4; ++dp) {
        uint32_t b0, b1, b2, b3;
        ldsm_x4_t(st + S::pv_ldsm_off(lane, kp, warp, dp), b0, b1, b2, b3);
#pragma unroll
        for (int mt = 0; mt < 4; ++mt) {
          mma_16816(o[mt][2 * dp], pa[mt], b0, b1);
          mma_16816(o[mt][2 * dp + 1], pa[mt], b2, b3);
        }
      }
    }
  };

  if constexpr (kStages == 3) {
    load_tile(1, c0{}, c_mid{});
    store_tile(1, c0{}, c_mid{});
    load_tile(1, c_mid{}, c_end{});
    __syncthreads();  // tile 0 and the first part of tile 1 in their stages, Q
    for (int it = 0; it < n_tiles; ++it) {
      // Past the last tile, loads read nothing and store zeros into a stage nobody reads.
      tc16_s_phase(sbase + R::stage_off(it), qf, sbase + R::off_sp, mh, part, lane);
      store_tile(it + 1, c_mid{}, c_end{});  // tile it + 1 complete (visible after B)
      __syncthreads();                       // B
      prefetch_tile(it + 3);
      load_tile(it + 2, c0{}, c_mid{});
      softmax_phase(it);
      __syncthreads();  // C
      pv_phase(sbase + R::stage_off(it));
      store_tile(it + 2, c0{}, c_mid{});  // its stage was last read by P V(it - 1), before B(it)
      load_tile(it + 2, c_mid{}, c_end{});
    }
  } else {
    for (int it = 0; it < n_tiles; ++it) {
      const uint32_t st = sbase + R::stage_off(it);
      __syncthreads();  // A
      prefetch_tile(it + 2);
      load_tile(it + 1, c0{}, c_mid{});  // past the last tile: nothing read, zeros stored (unread)
      tc16_s_phase(st, qf, sbase + R::off_sp, mh, part, lane);
      store_tile(it + 1, c0{}, c_mid{});
      load_tile(it + 1, c_mid{}, c_end{});
      __syncthreads();  // B
      softmax_phase(it);
      __syncthreads();  // C
      pv_phase(st);
      store_tile(it + 1, c_mid{}, c_end{});
    }
  }

  detail::pdl_trigger();  // as mla_decode_tc_kernel

  // Row sums and maxima to shared memory (the partial scores' region, last read before C
  // of the last tile), then the outputs.
  float* l_s = reinterpret_cast<float*>(smem + R::off_sp);
  float* m_s = l_s + L::heads;
  {
    float l = l_run;
    l += __shfl_xor_sync(0xffffffffu, l, 1);
    l += __shfl_xor_sync(0xffffffffu, l, 2);
    __syncthreads();
    if (t == 0) l_s[row_s] = l, m_s[row_s] = m_run;
    __syncthreads();
  }
#pragma unroll
  for (int mt = 0; mt < 4; ++mt) {
#pragma unroll
    for (int hr = 0; hr < 2; ++hr) {
      const int row = 16 * mt + 8 * hr + g, h = h0 + row;
      if (h >= a.heads) continue;
      const int64_t rh = int64_t{r} * a.heads + h;
      const int d0 = 64 * warp + 2 * t;
      if (a.splits == 1) {
        const float inv = 1.0f / l_s[row];
        float* dst = a.o_lat + rh * L::rank + d0;
#pragma unroll
        for (int n = 0; n < 8; ++n)
          *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o[mt][n][2 * hr] * inv, o[mt][n][2 * hr + 1] * inv);
      } else {
        const int64_t ps = rh * a.splits + split;
        float* dst = a.part_acc + ps * L::rank + d0;
#pragma unroll
        for (int n = 0; n < 8; ++n)
          *reinterpret_cast<float2*>(dst + 8 * n) = make_float2(o[mt][n][2 * hr], o[mt][n][2 * hr + 1]);
        if (warp == 0 && t == 0) *reinterpret_cast<float2*>(a.part_ml + 2 * ps) = make_float2(m_s[row], l_s[row]);
      }
    }
  }
}

constexpr int max_splits = mla_tc_max_splits;

// One block per (row, head): o_lat = sum_j 2^(m_j - M) acc_j / sum_j 2^(m_j - M) l_j over
// the row's non-empty splits (none: zeros). The splits' weights go through shared memory
// (fixed reduction orders: deterministic); each thread owns 4 latent dims and keeps 8
// splits' loads in flight (a row of 1 x 8k has 129 splits).
constexpr int merge_threads = L::rank / 4;

__global__ void __launch_bounds__(merge_threads) mla_tc_merge_kernel(tc_args a) {
  __shared__ float e_s[max_splits];
  __shared__ float red[32];
  const int r = static_cast<int>(blockIdx.x), h = static_cast<int>(blockIdx.y), tid = threadIdx.x;
  detail::pdl_wait();
  detail::pdl_trigger();
  const int n_keys = a.list != nullptr ? a.count[r] : a.rinfo[r].last + 1;
  const int na = n_keys <= 0 ? 0 : min(a.splits, (n_keys + a.chunk - 1) / a.chunk);
  const int64_t rh = int64_t{r} * a.heads + h;
  const float* ml = a.part_ml + rh * a.splits * 2;
  float M = -INFINITY;
  for (int j = tid; j < na; j += merge_threads) M = fmaxf(M, ml[2 * j]);
  M = detail::warp_max(M);
  if ((tid & 31) == 0) red[tid >> 5] = M;
  __syncthreads();
  M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
  float den = 0.0f;
  for (int j = tid; j < na; j += merge_threads) {
    const float e = ex2(ml[2 * j] - M);
    e_s[j] = e;
    den = fmaf(e, ml[2 * j + 1], den);
  }
  den = detail::block_sum(den, red);  // its barriers also publish e_s
  float4 num = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
  const float* acc = a.part_acc + rh * a.splits * L::rank + 4 * tid;
#pragma unroll 8
  for (int j = 0; j < na; ++j) {
    const float e = e_s[j];
    const float4 x = *reinterpret_cast<const float4*>(acc + int64_t{j} * L::rank);
    num.x = fmaf(e, x.x, num.x), num.y = fmaf(e, x.y, num.y), num.z = fmaf(e, x.z, num.z),
    num.w = fmaf(e, x.w, num.w);
  }
  const float inv = den > 0.0f ? 1.0f / den : 0.0f;
  *reinterpret_cast<float4*>(a.o_lat + rh * L::rank + 4 * tid) =
      make_float4(num.x * inv, num.y * inv, num.z * inv, num.w * inv);
}


}  // namespace

// The shared memory of the larger kernel (the f32 staging's): either may run where this holds.
bool mla_tc_supported(int heads, int rank, int rope, size_t smem_per_block) {
  return heads > 0 && rank == L::rank && rope == L::rope && smem_per_block >= static_cast<size_t>(L::smem_bytes);
}

mla_tc_plan plan_mla_tc(int64_t rows, int heads, int64_t max_keys, int n_sm) {
  const L::split_plan sp = L::plan_splits(rows, heads, max_keys, n_sm, max_splits);
  mla_tc_plan p;
  p.chunk = sp.chunk, p.splits = sp.splits, p.head_groups = sp.head_groups;
  if (p.splits > 1)
    p.part_bytes = static_cast<size_t>(std::max<int64_t>(rows, 1)) * heads * p.splits * (L::rank + 2) * sizeof(float);
  return p;
}

size_t mla_tc_smem_bytes() { return L::smem_bytes; }

void mla_attend_tc(const mla_tc_plan& plan, const float* qcat, int heads, const key_cache& kc, const row_batch& b,
                   const row_info* rinfo, const int32_t* list, const int32_t* count, int64_t list_stride,
                   float scale, bool early, void* part, float* o_lat, cudaStream_t stream) {
  const int64_t n = b.n_tokens;
  if (n == 0) return;
  // TANDEM_CUDA_MLA_TC_PREFETCH=0: no L2 prefetch in the f16-staging kernel (to measure it).
  const char* pf = std::getenv("TANDEM_CUDA_MLA_TC_PREFETCH");
  const std::string prefetch = pf != nullptr ? pf : "";
  if (!prefetch.empty() && prefetch != "0" && prefetch != "1")
    throw std::invalid_argument("TANDEM_CUDA_MLA_TC_PREFETCH must be 0 or 1, not '" + prefetch + "'");
  tc_args a{qcat, heads, kc, b, rinfo, list, count, list_stride, scale * 1.4426950408889634f, plan.chunk,
            plan.splits, early ? 1 : 0, prefetch == "0" ? 0 : 1, nullptr, nullptr, o_lat};
  if (plan.splits > 1) {
    a.part_acc = static_cast<float*>(part);
    a.part_ml = a.part_acc + n * heads * plan.splits * L::rank;
  }
  // TANDEM_CUDA_MLA_TC_STAGE picks the kernel: f16 (or unset) mla_decode_tc16_kernel<3>, f16s2
  // mla_decode_tc16_kernel<2>, f32 mla_decode_tc_kernel (read at every call, so one process
  // can compare them: bench_cuda_mla and gpu_mla do).
  const char* e = std::getenv("TANDEM_CUDA_MLA_TC_STAGE");
  const std::string stage = e != nullptr ? e : "";
  if (!stage.empty() && stage != "f16" && stage != "f16s2" && stage != "f32")
    throw std::invalid_argument("TANDEM_CUDA_MLA_TC_STAGE must be f16, f16s2 or f32, not '" + stage + "'");
  const int kind = stage == "f32" ? 0 : stage == "f16s2" ? 1 : 2;
  static bool sized[16][3] = {};  // the attribute is per device
  int dev = 0;
  cudaGetDevice(&dev);
  const dim3 grid(static_cast<unsigned>(n * plan.splits), static_cast<unsigned>(plan.head_groups));
  auto launch = [&](auto kernel, int smem) {
    if (!sized[dev & 15][kind]) {
      cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, smem);
      sized[dev & 15][kind] = true;
    }
    detail::launch_pdl(kernel, grid, dim3(L::threads), static_cast<size_t>(smem), stream, a);
  };
  if (kind == 0) launch(mla_decode_tc_kernel, L::smem_bytes);
  else if (kind == 1) launch(mla_decode_tc16_kernel<2>, S::regions<2>::smem_bytes);
  else launch(mla_decode_tc16_kernel<3>, S::regions<3>::smem_bytes);
  if (plan.splits > 1)
    detail::launch_pdl(mla_tc_merge_kernel, dim3(static_cast<unsigned>(n), static_cast<unsigned>(heads)),
                       dim3(merge_threads), size_t{0}, stream, a);
}

}  // namespace tandem::cuda
