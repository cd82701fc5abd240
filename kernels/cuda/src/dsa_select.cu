// DeepSeek sparse attention's indexer, scoring and top-k selection (see dsa_select in
// tandem_cuda/mla.hpp). Correctness first: the scores of a batch of rows go to global
// scratch, then one block per row selects.
//
// Scoring: a block = (row, 256 keys), the row's rotated query heads and head weights staged
// in shared memory; one warp per key, lanes across the key's dims (float4 each), a warp sum
// per head, then relu, weight and the sum over heads as backend.cpu orders them (fp32).
//
// Selection: scores map to order-preserving 32-bit keys (NaN as -inf, -0 as +0). Four
// 8-bit radix passes (shared histograms, warp-aggregated atomics) find T, the value of the
// top_k-th best score, and how many of the keys equal to T are taken. One more pass gathers
// every key above T and the first ones equal to T in position order (a block prefix sum),
// each as the 64-bit (value, -position) so that ties sort to the lower position; a bitonic
// sort in shared memory orders the top_k, best first.
#include <algorithm>
#include <cmath>

#include "mla_common.cuh"

namespace tandem::cuda {
namespace {

constexpr int score_threads = 256, score_warps = score_threads / 32, score_keys = 256;

__global__ void __launch_bounds__(score_threads)
    dsa_score_kernel(const float* __restrict__ qrot, const float* __restrict__ wsc, int heads, int d, float q_scale,
                     key_cache kc, row_batch b, const row_info* __restrict__ rinfo, int64_t r0, int64_t max_keys,
                     float* __restrict__ scores) {
  extern __shared__ float4 sm4[];
  float* q_s = reinterpret_cast<float*>(sm4);  // [heads][d]
  float* w_s = q_s + heads * d;                // [heads]
  const int64_t r = r0 + blockIdx.y;
  const row_info ri = rinfo[r];
  const int n_keys = static_cast<int>(std::min<int64_t>(std::max(ri.last + 1, 0), max_keys));
  const int t0 = blockIdx.x * score_keys;
  if (t0 >= n_keys) return;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5, d4 = d / 4;
  const auto* q4 = reinterpret_cast<const float4*>(qrot + r * heads * d);
  for (int i = tid; i < heads * d4; i += score_threads) sm4[i] = q4[i];
  for (int h = tid; h < heads; h += score_threads) w_s[h] = wsc[r * heads + h];
  __syncthreads();
  const int t1 = min(n_keys, t0 + score_keys);
  float* out = scores + static_cast<int64_t>(blockIdx.y) * max_keys;
  for (int t = t0 + warp; t < t1; t += score_warps) {
    const auto* key = reinterpret_cast<const float4*>(kc.k + detail::slot_of(b, kc, ri.seq, t) * d);
    const float4 kv = lane < d4 ? key[lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    float acc = 0.0f;
    for (int h = 0; h < heads; ++h) {
      const float4 qv = lane < d4 ? sm4[h * d4 + lane] : make_float4(0.0f, 0.0f, 0.0f, 0.0f);
      float p = qv.x * kv.x;
      p = fmaf(qv.y, kv.y, p);
      p = fmaf(qv.z, kv.z, p);
      p = fmaf(qv.w, kv.w, p);
      const float s = detail::warp_sum(p) * q_scale;
      if (s > 0.0f) acc += w_s[h] * s;
    }
    if (lane == 0) out[t] = isnan(acc) ? -INFINITY : acc;
  }
}

constexpr int select_threads = 1024;

// Larger key = better score; NaN ranks as -inf, and -0 as +0 (they compare equal).
__device__ __forceinline__ uint32_t order_key(float f) {
  if (isnan(f)) f = -INFINITY;
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return u ^ ((u >> 31) != 0 ? 0xffffffffu : 0x80000000u);
}

// The sort key of (value, position), smallest = best: better values first, then lower
// positions. ~0 pads past the chosen ones.
__device__ __forceinline__ unsigned long long sort_key(uint32_t u, int t) {
  return ~((static_cast<unsigned long long>(u) << 32) | (0xffffffffu - static_cast<uint32_t>(t)));
}
__device__ __forceinline__ int32_t position_of(unsigned long long key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(~key & 0xffffffffu));
}

// One block per row of the batch; P (a power of two >= top_k) sort slots.
__global__ void __launch_bounds__(select_threads)
    dsa_topk_kernel(const float* __restrict__ scores, int64_t max_keys, int64_t r0, const row_info* __restrict__ rinfo,
                    int top_k, int P, int32_t* __restrict__ topk, int64_t topk_stride) {
  extern __shared__ unsigned long long keys[];  // [P]
  __shared__ unsigned hist[257];                // 256: lanes with nothing to count
  __shared__ int warp_sums[32];
  __shared__ uint32_t s_prefix;
  __shared__ int s_remaining, s_n;
  const int tid = threadIdx.x, lane = tid & 31;
  const int64_t r = r0 + blockIdx.x;
  const int n_keys = static_cast<int>(std::min<int64_t>(std::max(rinfo[r].last + 1, 0), max_keys));
  const float* sc = scores + static_cast<int64_t>(blockIdx.x) * max_keys;
  const int m = min(top_k, n_keys);
  if (tid == 0) s_n = 0, s_prefix = 0, s_remaining = top_k;
  __syncthreads();
  if (n_keys <= top_k) {  // every key is chosen
    for (int t = tid; t < n_keys; t += select_threads) keys[t] = sort_key(order_key(sc[t]), t);
  } else {
    uint32_t mask = 0;
    for (int shift = 24; shift >= 0; shift -= 8) {
      for (int i = tid; i < 257; i += select_threads) hist[i] = 0;
      __syncthreads();
      const uint32_t prefix = s_prefix;
      for (int base = 0; base < n_keys; base += select_threads) {
        const int t = base + tid;
        unsigned bin = 256;
        if (t < n_keys) {
          const uint32_t u = order_key(sc[t]);
          if ((u & mask) == prefix) bin = (u >> shift) & 0xffu;
        }
        const unsigned peers = __match_any_sync(0xffffffffu, bin);
        if (lane == __ffs(peers) - 1 && bin < 256) atomicAdd(&hist[bin], __popc(peers));
      }
      __syncthreads();
      if (tid == 0) {  // the bin holding the remaining-th best, counted from the top
        int above = 0, remaining = s_remaining;
        for (int bin = 255; bin >= 0; --bin) {
          const int c = static_cast<int>(hist[bin]);
          if (above + c >= remaining) {
            s_prefix = prefix | (static_cast<uint32_t>(bin) << shift);
            s_remaining = remaining - above;
            break;
          }
          above += c;
        }
      }
      mask |= 0xffu << shift;
      __syncthreads();
    }
    const uint32_t T = s_prefix;
    const int take_eq = s_remaining;  // keys equal to T to take, the lowest positions first
    int eq_taken = 0;
    for (int base = 0; base < n_keys; base += select_threads) {
      const int t = base + tid;
      const uint32_t u = t < n_keys ? order_key(sc[t]) : 0u;
      const bool gt = t < n_keys && u > T, eq = t < n_keys && u == T;
      if (gt) keys[atomicAdd(&s_n, 1)] = sort_key(u, t);
      int tile_eq = 0;
      const int rank = detail::block_exclusive_scan(eq ? 1 : 0, warp_sums, &tile_eq);
      if (eq && eq_taken + rank < take_eq) keys[atomicAdd(&s_n, 1)] = sort_key(u, t);
      eq_taken += tile_eq;
    }
  }
  for (int i = m + tid; i < P; i += select_threads) keys[i] = ~0ull;
  for (int size = 2; size <= P; size <<= 1) {
    for (int st = size / 2; st > 0; st >>= 1) {
      __syncthreads();
      for (int i = tid; i < P / 2; i += select_threads) {
        const int lo = 2 * st * (i / st) + i % st, hi = lo + st;
        const bool up = (lo & size) == 0;
        const unsigned long long a = keys[lo], c = keys[hi];
        if ((a > c) == up) keys[lo] = c, keys[hi] = a;
      }
    }
  }
  __syncthreads();
  int32_t* out = topk + r * topk_stride;
  for (int j = tid; j < top_k; j += select_threads) out[j] = j < m ? position_of(keys[j]) : -1;
}

int sort_slots(int top_k) {
  int P = 32;
  while (P < top_k) P *= 2;
  return P;
}

}  // namespace

void dsa_select(const dsa_plan& plan, const float* qrot, const float* wsc, const key_cache& kc, const row_batch& b,
                const row_info* rinfo, int32_t* topk, int64_t topk_stride, void* workspace, cudaStream_t stream) {
  if (plan.rows == 0) return;
  auto* scores = static_cast<float*>(workspace);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(plan.d));  // backend.cpu's rounding
  const size_t score_smem = (static_cast<size_t>(plan.heads) * plan.d + plan.heads) * sizeof(float);
  if (score_smem > 48 * 1024)
    cudaFuncSetAttribute(dsa_score_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(score_smem));
  const int P = sort_slots(plan.top_k);
  const size_t sort_smem = static_cast<size_t>(P) * sizeof(unsigned long long);
  if (sort_smem > 48 * 1024)
    cudaFuncSetAttribute(dsa_topk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(sort_smem));
  const auto key_blocks = static_cast<unsigned>((plan.max_keys + score_keys - 1) / score_keys);
  for (int64_t r0 = 0; r0 < plan.rows; r0 += plan.rows_per_batch) {
    const auto nb = static_cast<unsigned>(std::min(plan.rows_per_batch, plan.rows - r0));
    dsa_score_kernel<<<dim3(key_blocks, nb), score_threads, score_smem, stream>>>(
        qrot, wsc, plan.heads, plan.d, q_scale, kc, b, rinfo, r0, plan.max_keys, scores);
    dsa_topk_kernel<<<nb, select_threads, sort_smem, stream>>>(scores, plan.max_keys, r0, rinfo, plan.top_k, P, topk,
                                                               topk_stride);
  }
}

}  // namespace tandem::cuda
