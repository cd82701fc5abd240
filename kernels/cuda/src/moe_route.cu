// The MoE router (tandem_cuda/moe.hpp: moe_route) and the grouping of (token, slot) pairs by
// expert that moe_forward starts with (moe_grouped.cuh: moe_plan).
//
// moe_route: one warp per token, its choice scores in shared memory (E + n_group floats).
// Semantics are backend.cpu's route_row (plugins/cpu/moe.cpp) step for step: the same float
// operations in the same order (sigmoid 1 / (1 + expf(-l)), choice s + bias, group score
// best + second, the weights' sum in slot order, / (sum + 1e-20f), * scale), NaN choices as
// -inf, ties to the lower group / expert index. Only expf may differ from the host's by an
// ulp, so ids agree except at near ties and weights within ~1e-7 relative.
//  - group scores (only when topk_group < n_group): per group a warp top-2 merge;
//  - the topk_group best groups: topk_group warp argmaxes over the group scores; experts of
//    the other groups are masked (their choice set to NaN, "not a candidate");
//  - top_k warp argmaxes over the candidates (each lane scans experts lane, lane + 32, ...;
//    the winner is masked by the lane that owns it, so no warp sync is needed between rounds).
//
// moe_plan: one block of 1024 threads, expert e = thread e (E <= 1024): per-expert counts by
// shared atomics, exclusive scans (slots, active experts, row tiles of at most `cap` rows:
// moe_tiles.hpp), then each pair takes a slot of its expert.
#include <cmath>
#include <cstdio>

#include "common.cuh"
#include "moe_grouped.cuh"
#include "tandem_cuda/block_scan.cuh"
#include "tandem_cuda/moe.hpp"

namespace tandem::cuda {
namespace {

constexpr int route_warps = 4;
constexpr size_t route_smem_cap = 48 * 1024;
constexpr int no_index = 0x7fffffff;

size_t per_warp_floats(int E, int n_group) { return static_cast<size_t>(E) + static_cast<size_t>(n_group); }

// (v, i) better than (w, j): a real entry beats none; then larger v, then smaller index.
__device__ __forceinline__ bool better(float v, int i, float w, int j) {
  if (i == no_index) return false;
  if (j == no_index) return true;
  return v > w || (v == w && i < j);
}

// Warp argmax of (v, i) (every lane gets the winner).
__device__ __forceinline__ void warp_best(float& v, int& i) {
#pragma unroll
  for (int o = 16; o > 0; o >>= 1) {
    const float ov = __shfl_xor_sync(0xffffffffu, v, o);
    const int oi = __shfl_xor_sync(0xffffffffu, i, o);
    if (better(ov, oi, v, i)) v = ov, i = oi;
  }
}

__global__ void __launch_bounds__(route_warps * 32) route_kernel(const float* __restrict__ logits, int64_t ld,
                                                                 const float* __restrict__ bias, int64_t n,
                                                                 dev_moe_routing r, int32_t* __restrict__ ids,
                                                                 float* __restrict__ weights) {
  extern __shared__ float route_smem[];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int64_t t = int64_t{blockIdx.x} * (blockDim.x >> 5) + warp;
  if (t >= n) return;  // no block-wide barriers below
  const int E = r.n_experts, G = r.n_group, per = E / G;
  float* c = route_smem + static_cast<size_t>(warp) * (E + G);
  float* gs = c + E;
  const float* l = logits + t * ld;
  for (int e = lane; e < E; e += 32) {
    const float s = 1.0f / (1.0f + expf(-l[e]));
    const float v = s + (bias != nullptr ? bias[e] : 0.0f);
    c[e] = isnan(v) ? -INFINITY : v;
  }
  __syncwarp();
  if (r.topk_group < G) {
    for (int g = 0; g < G; ++g) {
      float b1 = -INFINITY, b2 = -INFINITY;
      for (int e = g * per + lane; e < (g + 1) * per; e += 32) {
        const float v = c[e];
        if (v > b1) {
          b2 = b1;
          b1 = v;
        } else if (v > b2) {
          b2 = v;
        }
      }
#pragma unroll
      for (int o = 16; o > 0; o >>= 1) {
        const float o1 = __shfl_xor_sync(0xffffffffu, b1, o), o2 = __shfl_xor_sync(0xffffffffu, b2, o);
        const float n2 = fmaxf(fminf(b1, o1), fmaxf(b2, o2));
        b1 = fmaxf(b1, o1);
        b2 = n2;
      }
      if (lane == 0) {
        const float sc = per == 1 ? b1 : b1 + b2;
        gs[g] = isnan(sc) ? -INFINITY : sc;
      }
    }
    __syncwarp();
    // The topk_group best groups, marked NaN in gs.
    for (int i = 0; i < r.topk_group; ++i) {
      float bv = -INFINITY;
      int bi = no_index;
      for (int g = lane; g < G; g += 32) {
        const float v = gs[g];
        if (!isnan(v) && better(v, g, bv, bi)) bv = v, bi = g;
      }
      warp_best(bv, bi);
      if (lane == 0) gs[bi] = NAN;
      __syncwarp();
    }
    for (int e = lane; e < E; e += 32)
      if (!isnan(gs[e / per])) c[e] = NAN;  // outside the chosen groups: not a candidate
    __syncwarp();
  }
  int mine = 0;  // lane j keeps the j-th choice
  for (int j = 0; j < r.top_k; ++j) {
    float bv = -INFINITY;
    int bi = no_index;
    for (int e = lane; e < E; e += 32) {
      const float v = c[e];
      if (!isnan(v) && better(v, e, bv, bi)) bv = v, bi = e;
    }
    warp_best(bv, bi);
    if ((bi & 31) == lane) c[bi] = NAN;  // its owner masks it for the next rounds
    if (lane == j) mine = bi;
  }
  // Weights: s of the chosen (recomputed exactly as above), summed in slot order.
  const float s = lane < r.top_k ? 1.0f / (1.0f + expf(-l[mine])) : 0.0f;
  float sum = 0.0f;
  for (int j = 0; j < r.top_k; ++j) sum += __shfl_sync(0xffffffffu, s, j);
  if (lane < r.top_k) {
    float w = s;
    if (r.norm_topk_prob) w /= sum + 1e-20f;
    w *= r.routed_scaling_factor;
    ids[t * r.top_k + lane] = mine;
    weights[t * r.top_k + lane] = w;
  }
}

__global__ void __launch_bounds__(1024) plan_kernel(const int32_t* __restrict__ ids, int P, int top_k, int E, int cap,
                                                    moe_detail::moe_ws w) {
  __shared__ int s_cnt[moe_max_experts];
  __shared__ int s_cur[moe_max_experts];
  __shared__ int s_warp[32];
  const int tid = threadIdx.x;
  s_cnt[tid] = 0;
  __syncthreads();
  for (int p = tid; p < P; p += 1024) {
    const int e = ids[p];
    if (e >= 0 && e < E) atomicAdd(&s_cnt[e], 1);
  }
  __syncthreads();
  const int c = tid < E ? s_cnt[tid] : 0;
  const int nt = moe_detail::tiles_of(c, cap);
  int valid = 0, n_active = 0, n_tiles = 0;
  const int off = block_exclusive_scan(c, s_warp, &valid);
  const int aoff = block_exclusive_scan(c > 0 ? 1 : 0, s_warp, &n_active);
  const int toff = block_exclusive_scan(nt, s_warp, &n_tiles);
  if (tid < E) {
    w.counts[tid] = c;
    w.offsets[tid] = off;
    s_cur[tid] = off;
    if (c > 0) w.active[aoff] = tid;
  }
  if (tid == 0) {
    w.offsets[E] = valid;
    w.hdr[0] = n_active;
    w.hdr[1] = n_tiles;
    w.hdr[2] = valid;
  }
  for (int j = 0; j < nt; ++j)
    w.tiles[toff + j] = make_int4(tid, off + j * cap, moe_detail::rows_of_tile(c, cap, j), 0);
  __syncthreads();
  for (int p = tid; p < P; p += 1024) {
    const int e = ids[p];
    if (e >= 0 && e < E) {
      const int s = atomicAdd(&s_cur[e], 1);
      w.slot_tok[s] = p / top_k;
      w.slot_pair[s] = p;
      w.pair_slot[p] = s;
    } else {
      w.pair_slot[p] = -1;
    }
  }
}

}  // namespace

bool moe_route_fits(int n_experts, int n_group) {
  return n_experts > 0 && n_group > 0 && per_warp_floats(n_experts, n_group) * sizeof(float) <= route_smem_cap;
}

void moe_route(const float* logits, int64_t ld, const float* bias, int64_t n, const dev_moe_routing& r, int32_t* ids,
               float* weights, cudaStream_t stream) {
  if (n <= 0) return;
  const size_t per = per_warp_floats(r.n_experts, r.n_group) * sizeof(float);
  // Up to route_warps tokens per block, fewer when E is large (48 KB of shared memory).
  const int warps = static_cast<int>(std::min<size_t>(route_warps, std::max<size_t>(1, route_smem_cap / per)));
  const unsigned blocks = static_cast<unsigned>((n + warps - 1) / warps);
  route_kernel<<<blocks, warps * 32, per * warps, stream>>>(logits, ld, bias, n, r, ids, weights);
}

namespace moe_detail {

void moe_plan(const int32_t* ids, int64_t P, int top_k, int E, int cap, const moe_ws& w, cudaStream_t stream) {
  plan_kernel<<<1, 1024, 0, stream>>>(ids, static_cast<int>(P), top_k, E, cap, w);
}

}  // namespace moe_detail
}  // namespace tandem::cuda
