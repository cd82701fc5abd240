// Decode attention, the register-streaming variant (see attention_decode.cu for the choice):
// each warp streams 32 keys at a time straight from the pool (16 lanes per key row for q.k,
// lane = dims for p.v) with an online softmax, 8 K and 8 V rows in flight per lane; the
// block holding a sequence's newest key rotates q and k (RoPE), writes the new k and v into
// the pool and reads them back with plain (coherent) loads; the last block of each
// (sequence, KV head) merges the splits by ticket. At 32 sequences x 8k keys it keeps more
// blocks per SM than the tiled variant and reaches more of the copy bandwidth.
#include <cfloat>
#include <type_traits>

#include "common.cuh"
#include "attention_decode.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

constexpr int warps = 4;
   // V rows loaded before their FMAs (loads in flight per lane)

__device__ __forceinline__ int64_t slot_at(const dev_batch& b, const dev_kv& kv, int s, int t) {
  const int32_t page = b.page_table[int64_t{s} * b.max_pages + t / kv.page_size];
  if (page < 0 || page >= kv.n_pages) return -1;
  return int64_t{page} * kv.page_size + t % kv.page_size;
}

// Rotates the head_dim floats at v (shared memory) in place by `pos`, with the host-made
// (cos, sin) table when there is one, else computing the angle in double as the reference.
__device__ void rotate(float* v, int head_dim, int pos, const dev_rope& r, int tid, int nthreads) {
  const int rot = r.rotary_dims == 0 ? head_dim : r.rotary_dims;
  const int half = rot / 2;
  for (int p = tid; p < half; p += nthreads) {
    float c, s;
    if (r.table != nullptr && pos < r.table_positions) {
      const float2 cs = r.table[int64_t{pos} * half + p];
      c = cs.x, s = cs.y;
    } else {
      const double angle = static_cast<double>(pos) * pow(static_cast<double>(r.theta), -2.0 * p / rot);
      c = static_cast<float>(cos(angle)), s = static_cast<float>(sin(angle));
    }
    const int a = r.neox ? p : 2 * p, b = r.neox ? p + half : 2 * p + 1;
    const float x0 = v[a], x1 = v[b];
    v[a] = x0 * c - x1 * s;
    v[b] = x0 * s + x1 * c;
  }
}


template <int HD, int GM>
__global__ void __launch_bounds__(warps * 32)
    decode_kernel(const float* __restrict__ q, const float* __restrict__ k_new, const float* __restrict__ v_new,
                  int n_heads, dev_kv kv, dev_batch b, dev_rope rope, float scale, int chunk,
                  int n_splits, decode_partial<HD>* __restrict__ parts, int* __restrict__ tickets, float* __restrict__ out) {
  constexpr int DPL = HD / 32;  // dims per lane in the p.v pass
  __shared__ __align__(16) float qs[GM][HD];
  __shared__ float kn[HD];
  __shared__ float wm[warps][GM], wl[warps][GM];
  __shared__ float wacc[warps][GM][HD];
  __shared__ bool last;
  detail::pdl_wait();
  detail::pdl_trigger();
  const int split = blockIdx.x, kvh = blockIdx.y, s = blockIdx.z;
  const int G = n_heads / kv.n_kv_heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int len = b.seq_lens[s];
  const int n_active = (len + chunk - 1) / chunk;
  if (split >= n_active) return;
  const int pos = len - 1;

  for (int i = tid; i < G * HD; i += warps * 32) qs[i / HD][i % HD] = q[(int64_t{s} * n_heads + kvh * G) * HD + i];
  const bool has_new = split == n_active - 1;
  const int64_t ts = int64_t{kv.n_kv_heads} * HD;
  if (has_new) {
    for (int i = tid; i < HD; i += warps * 32) kn[i] = k_new[int64_t{s} * ts + kvh * HD + i];
  }
  __syncthreads();
  if (rope.on) {
    for (int g = warp; g < G; g += warps) rotate(qs[g], HD, pos, rope, lane, 32);
    if (has_new && warp == warps - 1) rotate(kn, HD, pos, rope, lane, 32);
    __syncthreads();
  }
  if (has_new) {  // the newest key and value join the pool before anyone reads them
    const int64_t slot = b.slot_mapping[s];
    if (slot >= 0 && slot < kv.n_pages * kv.page_size) {
      for (int i = tid; i < HD; i += warps * 32) {
        kv.k[slot * ts + kvh * HD + i] = kn[i];
        kv.v[slot * ts + kvh * HD + i] = v_new[int64_t{s} * ts + kvh * HD + i];
      }
    }
    __syncthreads();  // block-wide visibility of those global writes
  }
  // Scale folded into q once.
  for (int i = tid; i < G * HD; i += warps * 32) qs[i / HD][i % HD] *= scale;
  __syncthreads();

  float m[GM], l[GM], acc[GM][DPL];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int i = 0; i < DPL; ++i) acc[g][i] = 0.0f;
  }
  constexpr int DPS = HD / 16;  // dims per lane in the q.k pass
  // Rows in flight per lane: 8 K rounds and 8 V rows. (All 16 and 32 at head_dim 64 —
  // one round trip per group — took 206 registers and fell from 42% to 25% of copy
  // bandwidth at 32 x 8k on the H200 while batch-1 decode did not move: occupancy wins.)
  constexpr int k_batch = 8, v_batch = 8;
  float qreg[GM][DPS];
#pragma unroll
  for (int g = 0; g < GM; ++g)
#pragma unroll
    for (int i = 0; i < DPS; ++i) qreg[g][i] = g < G ? qs[g][(lane & 15) * DPS + i] : 0.0f;
  const int k0 = split * chunk, k1 = min(len, k0 + chunk);
  for (int base = k0 + warp * 32; base < k1; base += warps * 32) {
    const int t = base + lane;
    const int64_t slot = t < k1 ? slot_at(b, kv, s, t) : -1;
    // q.k with coalesced K reads: 16 lanes read one key row together (HD / 16 floats
    // each), so a warp load touches 2 rows instead of 32; round i covers keys i and i + 16
    // of this group, reduced over the 16 lanes, and lane l keeps key l's score. V rows are
    // requested after the softmax (holding them across the q.k pass costs occupancy).
    const int half = lane >> 4, sub = lane & 15;
    const int n_keys = min(32, k1 - base);
    float4 kreg[k_batch][DPS / 4];
    float vreg[v_batch][DPL];
    auto load_k = [&](int i0) {
#pragma unroll
      for (int i = 0; i < k_batch; ++i) {
        const int64_t sk = __shfl_sync(0xffffffffu, slot, i0 + i + 16 * half);
#pragma unroll
        for (int c = 0; c < DPS / 4; ++c)  // plain loads: the block may have just written the newest key
          kreg[i][c] = sk >= 0 ? reinterpret_cast<const float4*>(kv.k + sk * ts + kvh * HD + sub * DPS)[c]
                               : make_float4(0.f, 0.f, 0.f, 0.f);
      }
    };
    auto load_v = [&](int j0) {
#pragma unroll
      for (int jj = 0; jj < v_batch; ++jj) {
        const int j = j0 + jj;
        const int64_t sj = __shfl_sync(0xffffffffu, slot, j & 31);
#pragma unroll
        for (int i = 0; i < DPL; ++i) vreg[jj][i] = 0.0f;
        if (j < n_keys && sj >= 0) {
          const float* vr = kv.v + sj * ts + kvh * HD + lane * DPL;
          if constexpr (DPL == 2) {
            const float2 v2 = *reinterpret_cast<const float2*>(vr);
            vreg[jj][0] = v2.x, vreg[jj][1] = v2.y;
          } else {
            const float4 v4 = *reinterpret_cast<const float4*>(vr);
            vreg[jj][0] = v4.x, vreg[jj][1] = v4.y, vreg[jj][2] = v4.z, vreg[jj][3] = v4.w;
          }
        }
      }
    };
    load_k(0);
    float sc[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) sc[g] = 0.0f;
    for (int i0 = 0; i0 < 16; i0 += k_batch) {
      if (i0 > 0) load_k(i0);
#pragma unroll
      for (int i = 0; i < k_batch; ++i) {
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          if (g < G) {
            float d = 0.0f;
#pragma unroll
            for (int c = 0; c < DPS / 4; ++c)
              d = fmaf(qreg[g][4 * c], kreg[i][c].x, fmaf(qreg[g][4 * c + 1], kreg[i][c].y,
                  fmaf(qreg[g][4 * c + 2], kreg[i][c].z, fmaf(qreg[g][4 * c + 3], kreg[i][c].w, d))));
            d += __shfl_xor_sync(0xffffffffu, d, 8);
            d += __shfl_xor_sync(0xffffffffu, d, 4);
            d += __shfl_xor_sync(0xffffffffu, d, 2);
            d += __shfl_xor_sync(0xffffffffu, d, 1);
            if (i0 + i == sub) sc[g] = d;
          }
        }
      }
    }
    float p[GM];
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      if (g < G) {
        const float x = slot >= 0 ? sc[g] : -INFINITY;
        const float m_new = fmaxf(m[g], detail::warp_max(x));
        const bool any = m_new != -INFINITY;  // false only when no key so far was readable
        const float corr = any ? expf(m[g] - m_new) : 1.0f;
        p[g] = slot >= 0 ? expf(x - m_new) : 0.0f;
        l[g] = l[g] * corr + detail::warp_sum(p[g]);
#pragma unroll
        for (int i = 0; i < DPL; ++i) acc[g][i] *= corr;
        m[g] = m_new;
      }
    }
    for (int j0 = 0; j0 < n_keys; j0 += v_batch) {
      load_v(j0);
#pragma unroll
      for (int jj = 0; jj < v_batch; ++jj) {
#pragma unroll
        for (int g = 0; g < GM; ++g) {
          if (g < G) {
            const float pj = __shfl_sync(0xffffffffu, p[g], (j0 + jj) & 31);  // 0 past n_keys
#pragma unroll
            for (int i = 0; i < DPL; ++i) acc[g][i] = fmaf(pj, vreg[jj][i], acc[g][i]);
          }
        }
      }
    }
  }
  // Merge the warps of this block into the split's partial result.
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g < G) {
      if (lane == 0) wm[warp][g] = m[g], wl[warp][g] = l[g];
#pragma unroll
      for (int i = 0; i < DPL; ++i) wacc[warp][g][lane * DPL + i] = acc[g][i];
    }
  }
  __syncthreads();
  const bool alone = n_active == 1;  // one split: this block's result is the answer
  for (int i = tid; i < G * HD; i += warps * 32) {
    const int g = i / HD, d = i % HD;
    float M = -INFINITY;
    for (int w = 0; w < warps; ++w) M = fmaxf(M, wm[w][g]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < warps; ++w) {
      if (wm[w][g] == -INFINITY) continue;  // a warp with no keys in this split
      const float e = expf(wm[w][g] - M);
      num = fmaf(e, wacc[w][g][d], num);
      den = fmaf(e, wl[w][g], den);
    }
    if (alone) {
      out[(int64_t{s} * n_heads + kvh * G + g) * HD + d] = num / den;
      continue;
    }
    decode_partial<HD>& P = parts[(int64_t{s} * n_heads + kvh * G + g) * n_splits + split];
    P.acc[d] = num;
    if (d == 0) P.m = M, P.l = den;
  }
  if (alone) return;
  // The last block of this (sequence, KV head) to get here merges every split.
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int* ticket = tickets + int64_t{s} * kv.n_kv_heads + kvh;
    last = atomicAdd(ticket, 1) == n_active - 1;
    if (last) *ticket = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = tid; i < G * HD; i += warps * 32) {
    const int g = i / HD, d = i % HD;
    const decode_partial<HD>* P = parts + (int64_t{s} * n_heads + kvh * G + g) * n_splits;
    float M = -INFINITY;
    for (int j = 0; j < n_active; ++j) M = fmaxf(M, __ldcg(&P[j].m));
    float num = 0.0f, den = 0.0f;
    for (int j = 0; j < n_active; ++j) {
      const float mj = __ldcg(&P[j].m);
      if (mj == -INFINITY) continue;
      const float e = expf(mj - M);
      num = fmaf(e, __ldcg(&P[j].acc[d]), num);
      den = fmaf(e, __ldcg(&P[j].l), den);
    }
    out[(int64_t{s} * n_heads + kvh * G + g) * HD + d] = num / den;
  }
}

}  // namespace

void attention_decode_split(const float* q, const float* k, const float* v, int n_heads, const dev_kv& kv,
                            const dev_batch& b, const dev_rope& rope, float scale, float* out,
                            const decode_plan& plan, void* scratch, int* tickets, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(b.n_seqs));
  const int G = n_heads / kv.n_kv_heads;
  auto launch = [&](auto hd, auto gm) {
    constexpr int HD = decltype(hd)::value, GM = decltype(gm)::value;
    detail::launch_pdl(decode_kernel<HD, GM>, grid, dim3(warps * 32), 0, stream, q, k, v, n_heads, kv, b, rope,
                       scale, plan.chunk, plan.splits, static_cast<decode_partial<HD>*>(scratch), tickets, out);
  };
  auto by_group = [&](auto hd) {
    if (G <= 1) launch(hd, std::integral_constant<int, 1>{});
    else if (G <= 2) launch(hd, std::integral_constant<int, 2>{});
    else if (G <= 4) launch(hd, std::integral_constant<int, 4>{});
    else launch(hd, std::integral_constant<int, 8>{});
  };
  if (kv.head_dim == 64) by_group(std::integral_constant<int, 64>{});
  else by_group(std::integral_constant<int, 128>{});
}

}  // namespace tandem::cuda
