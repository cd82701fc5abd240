// MLA's per-row preparation (row table, the latent cache write with k_rope rotated, the
// rotated q_rope beside the absorbed q) and the clean-up of top-k lists into the sorted,
// unique, causal key lists mla_attend reads.
#include <algorithm>
#include <climits>

#include "mla_common.cuh"

namespace tandem::cuda {
namespace {

using detail::find_row;

// One block per row.
__global__ void mla_prepare_kernel(const float* __restrict__ q, int64_t qs, const float* __restrict__ kv_a,
                                   int64_t as, int heads, int nope, int rope, int rank, double theta, key_cache kc,
                                   row_batch b, float* __restrict__ qcat, row_info* __restrict__ rinfo) {
  extern __shared__ float2 cs[];  // [rope / 2]
  const int r = blockIdx.x, tid = threadIdx.x, half = rope / 2, D = rank + rope;
  if (tid == 0) rinfo[r] = find_row(b, r);
  const int pos = b.positions[r];
  for (int i = tid; i < half; i += blockDim.x) cs[i] = detail::rope_angle(theta, rope, pos, i);
  __syncthreads();
  const float* a = kv_a + r * as;
  const int64_t slot = b.slot_mapping[r];
  if (slot >= 0 && slot < kc.n_pages * kc.page_size) {  // a bad slot writes nothing
    float* dst = kc.k + slot * D;
    for (int i = tid; i < rank; i += blockDim.x) dst[i] = a[i];
    for (int i = tid; i < half; i += blockDim.x) detail::rotate_pair(a + rank, dst + rank, i, cs[i]);
  }
  for (int idx = tid; idx < heads * half; idx += blockDim.x) {
    const int h = idx / half, i = idx % half;
    detail::rotate_pair(q + r * qs + int64_t{h} * (nope + rope) + nope, qcat + (int64_t{r} * heads + h) * D + rank, i,
                        cs[i]);
  }
  if (nope == 0) {  // no W_UK GEMM writes the absorbed part
    for (int idx = tid; idx < heads * rank; idx += blockDim.x)
      qcat[(int64_t{r} * heads + idx / rank) * D + idx % rank] = 0.0f;
  }
}

constexpr int sort_threads = 1024;

// One block per row: the row's k entries (P >= k, a power of two, slots past k empty) are
// sorted ascending with -1 / out-of-context entries as INT_MAX, then the distinct valid
// ones are compacted in order.
__global__ void __launch_bounds__(sort_threads)
    topk_sanitize_kernel(const int32_t* __restrict__ topk, int64_t stride, int k, int P,
                         const row_info* __restrict__ rinfo, int32_t* __restrict__ list, int32_t* __restrict__ count) {
  extern __shared__ int sv[];  // [P]
  __shared__ int warp_sums[32];
  const int r = blockIdx.x, tid = threadIdx.x;
  const int last = rinfo[r].last;
  for (int i = tid; i < P; i += sort_threads) {
    int v = i < k ? topk[r * stride + i] : INT_MAX;
    if (v < 0 || v > last) v = INT_MAX;
    sv[i] = v;
  }
  for (int size = 2; size <= P; size <<= 1) {
    for (int st = size / 2; st > 0; st >>= 1) {
      __syncthreads();
      for (int i = tid; i < P / 2; i += sort_threads) {
        const int lo = 2 * st * (i / st) + i % st, hi = lo + st;
        const bool up = (lo & size) == 0;
        const int a = sv[lo], c = sv[hi];
        if ((a > c) == up) sv[lo] = c, sv[hi] = a;
      }
    }
  }
  __syncthreads();
  // Each thread keeps a contiguous run of the sorted entries, so the scan keeps the order.
  const int E = (P + sort_threads - 1) / sort_threads, i0 = min(P, tid * E), i1 = min(P, i0 + E);
  auto keep = [&](int i) { return sv[i] != INT_MAX && (i == 0 || sv[i] != sv[i - 1]); };
  int mine = 0;
  for (int i = i0; i < i1; ++i) mine += keep(i);
  int total = 0;
  int at = detail::block_exclusive_scan(mine, warp_sums, &total);
  int32_t* out = list + int64_t{r} * k;
  for (int i = i0; i < i1; ++i)
    if (keep(i)) out[at++] = sv[i];
  if (tid == 0) count[r] = total;
}

}  // namespace

void mla_prepare(const float* q, int64_t q_stride, const float* kv_a, int64_t a_stride, int heads, int nope,
                 int rope, int rank, float theta, const key_cache& kc, const row_batch& b, float* qcat,
                 row_info* rinfo, cudaStream_t stream) {
  if (b.n_tokens == 0) return;
  mla_prepare_kernel<<<b.n_tokens, 128, sizeof(float2) * std::max(1, rope / 2), stream>>>(
      q, q_stride, kv_a, a_stride, heads, nope, rope, rank, static_cast<double>(theta), kc, b, qcat, rinfo);
}

void topk_sanitize(const int32_t* topk, int64_t stride, int k, int64_t n, const row_info* rinfo, int32_t* list,
                   int32_t* count, cudaStream_t stream) {
  if (n == 0 || k <= 0) return;
  int P = 32;
  while (P < k) P *= 2;
  const size_t smem = sizeof(int) * P;
  if (smem > 48 * 1024)
    cudaFuncSetAttribute(topk_sanitize_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
  topk_sanitize_kernel<<<static_cast<unsigned>(n), sort_threads, smem, stream>>>(topk, stride, k, P, rinfo, list,
                                                                                   count);
}

}  // namespace tandem::cuda
