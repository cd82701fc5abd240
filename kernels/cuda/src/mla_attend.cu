// MLA attention (absorbed form) over a key-only latent cache: the f32 kernel (any rank /
// rope / head count), the merge of split partials, and the work plan.
//
// A block = (row, split of its keys, group of 8 heads). Keys go through in sub-chunks of
// 64: their slots, then one warp per key dots the 8 heads' query with the cached row (lanes
// across the row, warp sums), an online softmax per head (one warp per head), then each
// thread updates its own latent dims of the 8 heads' accumulators, reading the rows again
// (coalesced; L1/L2). fp32 throughout: backend.cpu's arithmetic up to summation order.
#include <algorithm>
#include <climits>
#include <cmath>

#include "mla_common.cuh"

namespace tandem::cuda {
namespace {

using detail::slot_of;

struct mla_blocks_args {
  const float* qcat;
  int heads, rank, rope;
  key_cache kc;
  row_batch b;
  const row_info* rinfo;
  const int32_t* list;
  const int32_t* count;
  int64_t list_stride;
  float scale;
  int chunk, splits;
  float* part_acc;  // [n, heads, splits, rank]
  float* part_ml;   // [n, heads, splits, 2]: max (natural log units), sum
  float* o_lat;     // splits == 1: [n, heads, rank]
};

// ---- f32 attention

constexpr int g_threads = 256, g_warps = g_threads / 32, g_heads = 8, g_keys = 64;

size_t generic_smem(int rank, int rope) {
  const int D = rank + rope;
  return (size_t{g_heads} * D + size_t{g_heads} * rank + g_heads * g_keys + 3 * g_heads) * sizeof(float) +
         g_keys * sizeof(int64_t) + 16;
}

__global__ void __launch_bounds__(g_threads) mla_generic_kernel(mla_blocks_args a) {
  extern __shared__ __align__(16) float sm[];
  const int D = a.rank + a.rope;
  float* q_s = sm;                                // [g_heads][D]
  float* acc_s = q_s + g_heads * D;               // [g_heads][rank]
  float* sc = acc_s + g_heads * a.rank;           // [g_heads][g_keys]
  float* m_s = sc + g_heads * g_keys;             // [g_heads]
  float* l_s = m_s + g_heads;
  float* corr_s = l_s + g_heads;
  auto* slot_s = reinterpret_cast<int64_t*>((reinterpret_cast<uintptr_t>(corr_s + g_heads) + 15) & ~uintptr_t{15});

  const int r = blockIdx.x / a.splits, split = blockIdx.x % a.splits, h0 = blockIdx.y * g_heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int G = min(g_heads, a.heads - h0);
  const row_info ri = a.rinfo[r];
  const int n_keys = a.list != nullptr ? a.count[r] : ri.last + 1;
  if (n_keys <= 0) {
    if (a.splits == 1) {
      for (int i = tid; i < G * a.rank; i += g_threads)
        a.o_lat[(int64_t{r} * a.heads + h0 + i / a.rank) * a.rank + i % a.rank] = 0.0f;
    }
    return;
  }
  const int k0 = split * a.chunk;
  if (k0 >= n_keys) return;
  const int k1 = min(n_keys, k0 + a.chunk);
  for (int i = tid; i < g_heads * D; i += g_threads) {
    const int g = i / D;
    q_s[i] = g < G ? a.qcat[(int64_t{r} * a.heads + h0 + g) * D + i % D] : 0.0f;
  }
  for (int i = tid; i < g_heads * a.rank; i += g_threads) acc_s[i] = 0.0f;
  if (tid < g_heads) m_s[tid] = -INFINITY, l_s[tid] = 0.0f;
  const int32_t* lst = a.list != nullptr ? a.list + r * a.list_stride : nullptr;

  for (int c0 = k0; c0 < k1; c0 += g_keys) {
    const int cnt = min(g_keys, k1 - c0);
    __syncthreads();  // the previous sub-chunk's readers of slot_s / sc are done
    if (tid < cnt) slot_s[tid] = slot_of(a.b, a.kc, ri.seq, lst != nullptr ? lst[c0 + tid] : c0 + tid);
    __syncthreads();
    for (int j = warp; j < cnt; j += g_warps) {
      const float* key = a.kc.k + slot_s[j] * D;
      float dot[g_heads];
#pragma unroll
      for (int g = 0; g < g_heads; ++g) dot[g] = 0.0f;
      for (int i = lane; i < D; i += 32) {
        const float kv = key[i];
#pragma unroll
        for (int g = 0; g < g_heads; ++g) dot[g] = fmaf(q_s[g * D + i], kv, dot[g]);
      }
#pragma unroll
      for (int g = 0; g < g_heads; ++g) dot[g] = detail::warp_sum(dot[g]);
      if (lane == 0) {
#pragma unroll
        for (int g = 0; g < g_heads; ++g) sc[g * g_keys + j] = dot[g] * a.scale;
      }
    }
    __syncthreads();
    if (warp < G) {
      float* s = sc + warp * g_keys;
      float mx = -INFINITY;
      for (int j = lane; j < cnt; j += 32) mx = fmaxf(mx, s[j]);
      mx = detail::warp_max(mx);
      const float m_old = m_s[warp], m_new = fmaxf(m_old, mx);
      float sum = 0.0f;
      for (int j = lane; j < cnt; j += 32) {
        const float p = m_new == -INFINITY ? 0.0f : expf(s[j] - m_new);
        s[j] = p;
        sum += p;
      }
      sum = detail::warp_sum(sum);
      if (lane == 0) {
        const float corr = m_new == -INFINITY ? 1.0f : expf(m_old - m_new);
        l_s[warp] = l_s[warp] * corr + sum;
        m_s[warp] = m_new;
        corr_s[warp] = corr;
      }
    }
    __syncthreads();
    for (int d = tid; d < a.rank; d += g_threads) {
      float o[g_heads];
#pragma unroll
      for (int g = 0; g < g_heads; ++g) o[g] = g < G ? acc_s[g * a.rank + d] * corr_s[g] : 0.0f;
      for (int j = 0; j < cnt; ++j) {
        const float c = a.kc.k[slot_s[j] * D + d];
#pragma unroll
        for (int g = 0; g < g_heads; ++g) o[g] = fmaf(sc[g * g_keys + j], c, o[g]);
      }
#pragma unroll
      for (int g = 0; g < g_heads; ++g)
        if (g < G) acc_s[g * a.rank + d] = o[g];
    }
  }
  __syncthreads();
  for (int i = tid; i < G * a.rank; i += g_threads) {
    const int g = i / a.rank, d = i % a.rank;
    const int64_t rh = int64_t{r} * a.heads + h0 + g;
    if (a.splits == 1) {
      a.o_lat[rh * a.rank + d] = acc_s[i] / l_s[g];
    } else {
      a.part_acc[(rh * a.splits + split) * a.rank + d] = acc_s[i];
      if (d == 0) {
        a.part_ml[(rh * a.splits + split) * 2] = m_s[g];
        a.part_ml[(rh * a.splits + split) * 2 + 1] = l_s[g];
      }
    }
  }
}

// ---- merge of split partials

constexpr int merge_threads = 128, max_splits = 1024;

__global__ void __launch_bounds__(merge_threads) mla_merge_kernel(mla_blocks_args a) {
  __shared__ float e_s[max_splits];
  __shared__ float l_tot;
  const int dparts = (a.rank + merge_threads - 1) / merge_threads;
  const int r = blockIdx.x / dparts, dp = blockIdx.x % dparts, h = blockIdx.y, tid = threadIdx.x;
  const row_info ri = a.rinfo[r];
  const int n_keys = a.list != nullptr ? a.count[r] : ri.last + 1;
  const int na = n_keys <= 0 ? 0 : min(a.splits, (n_keys + a.chunk - 1) / a.chunk);
  const int64_t rh = int64_t{r} * a.heads + h;
  const float* ml = a.part_ml + rh * a.splits * 2;
  float M = -INFINITY;
  for (int j = 0; j < na; ++j) M = fmaxf(M, ml[2 * j]);
  for (int j = tid; j < na; j += merge_threads) e_s[j] = ml[2 * j] == -INFINITY ? 0.0f : expf(ml[2 * j] - M);
  __syncthreads();
  if (tid == 0) {
    float L = 0.0f;
    for (int j = 0; j < na; ++j) L = fmaf(e_s[j], ml[2 * j + 1], L);
    l_tot = L;
  }
  __syncthreads();
  const int d = dp * merge_threads + tid;
  if (d >= a.rank) return;
  const float* acc = a.part_acc + rh * a.splits * a.rank + d;
  float num = 0.0f;
  for (int j = 0; j < na; ++j) num = fmaf(e_s[j], acc[int64_t{j} * a.rank], num);
  a.o_lat[rh * a.rank + d] = l_tot > 0.0f ? num / l_tot : 0.0f;
}

}  // namespace

bool mla_shape_supported(int rank, int rope) {
  return rank > 0 && rope >= 0 && generic_smem(rank, rope) <= size_t{227} * 1024;
}

mla_plan plan_mla(int64_t rows, int heads, int rank, int rope, int64_t max_keys, int n_sm) {
  (void)rope;  // the f32 kernel's cost does not depend on it
  mla_plan p;
  p.head_groups = (heads + g_heads - 1) / g_heads;
  // Cost of s splits in tile-times: waves of blocks (about four per SM) times each block's
  // tiles plus its fixed work (staging q, writing a partial); the least wins.
  const int64_t tiles = std::max<int64_t>(1, (max_keys + g_keys - 1) / g_keys);
  const int64_t per_wave = int64_t{std::max(n_sm, 1)} * 4, overhead = 1;
  int64_t best_s = 1, best = INT64_MAX;
  for (int64_t s = 1; s <= std::min<int64_t>(tiles, max_splits); ++s) {
    const int64_t blocks = std::max<int64_t>(rows, 1) * p.head_groups * s;
    const int64_t cost = (blocks + per_wave - 1) / per_wave * ((tiles + s - 1) / s + overhead);
    if (cost < best) best = cost, best_s = s;
  }
  p.chunk = static_cast<int>((tiles + best_s - 1) / best_s * g_keys);
  p.splits = static_cast<int>((tiles * g_keys + p.chunk - 1) / p.chunk);
  if (p.splits > 1) p.part_bytes = static_cast<size_t>(rows) * heads * p.splits * (rank + 2) * sizeof(float);
  return p;
}

void mla_attend(const mla_plan& plan, const float* qcat, int heads, int rank, int rope, const key_cache& kc,
                const row_batch& b, const row_info* rinfo, const int32_t* list, const int32_t* count,
                int64_t list_stride, float scale, void* part, float* o_lat, cudaStream_t stream) {
  const int64_t n = b.n_tokens;
  if (n == 0) return;
  mla_blocks_args a{qcat, heads, rank, rope, kc, b, rinfo, list, count, list_stride, scale, plan.chunk, plan.splits,
                    nullptr, nullptr, o_lat};
  if (plan.splits > 1) {
    a.part_acc = static_cast<float*>(part);
    a.part_ml = a.part_acc + n * heads * plan.splits * rank;
  }
  const size_t smem = generic_smem(rank, rope);
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(mla_generic_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  mla_generic_kernel<<<dim3(static_cast<unsigned>(n * plan.splits), static_cast<unsigned>(plan.head_groups)),
                       g_threads, smem, stream>>>(a);
  if (plan.splits > 1) {
    const int dparts = (rank + merge_threads - 1) / merge_threads;
    mla_merge_kernel<<<dim3(static_cast<unsigned>(n * dparts), static_cast<unsigned>(heads)), merge_threads, 0,
                       stream>>>(a);
  }
}

}  // namespace tandem::cuda
