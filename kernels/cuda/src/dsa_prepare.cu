// DeepSeek sparse attention's indexer, preparation: per row the row table entry, the key
// written to the indexer cache with its first rope dims rotated, the rotated query heads and
// the head weights scaled by heads^-1/2; and the work plan of dsa_select.
#include <algorithm>
#include <cmath>

#include "mla_common.cuh"

namespace tandem::cuda {
namespace {

// One block per row.
__global__ void dsa_prepare_kernel(const float* __restrict__ q, int64_t qs, const float* __restrict__ k, int64_t ks,
                                   const float* __restrict__ w, int64_t ws, int heads, int d, int rope, double theta,
                                   float h_scale, key_cache kc, row_batch b, float* __restrict__ qrot,
                                   float* __restrict__ wsc, row_info* __restrict__ rinfo) {
  extern __shared__ float2 cs[];  // [rope / 2]
  const int r = blockIdx.x, tid = threadIdx.x, half = rope / 2;
  if (tid == 0) rinfo[r] = detail::find_row(b, r);
  const int pos = b.positions[r];
  for (int i = tid; i < half; i += blockDim.x) cs[i] = detail::rope_angle(theta, rope, pos, i);
  __syncthreads();
  const float* kr = k + r * ks;
  const int64_t slot = b.slot_mapping[r];
  if (slot >= 0 && slot < kc.n_pages * kc.page_size) {  // a bad slot writes nothing
    float* dst = kc.k + slot * d;
    for (int i = rope + tid; i < d; i += blockDim.x) dst[i] = kr[i];
    for (int i = tid; i < half; i += blockDim.x) detail::rotate_pair(kr, dst, i, cs[i]);
  }
  const float* qr = q + r * qs;
  float* out = qrot + int64_t{r} * heads * d;
  for (int idx = tid; idx < heads * d; idx += blockDim.x) {
    const int i = idx % d;
    if (i >= rope) out[idx] = qr[idx];
    else if (i % 2 == 0) detail::rotate_pair(qr + idx - i, out + idx - i, i / 2, cs[i / 2]);
  }
  for (int h = tid; h < heads; h += blockDim.x) wsc[int64_t{r} * heads + h] = w[r * ws + h] * h_scale;
}

// Scores of a batch take at most this much scratch (rows go in batches to stay inside it).
constexpr size_t score_budget_bytes = size_t{256} << 20;

}  // namespace

void dsa_prepare(const float* q, int64_t q_stride, const float* k, int64_t k_stride, const float* w,
                 int64_t w_stride, int heads, int d, int rope, float theta, const key_cache& kc, const row_batch& b,
                 float* qrot, float* wsc, row_info* rinfo, cudaStream_t stream) {
  if (b.n_tokens == 0) return;
  const float h_scale = 1.0f / std::sqrt(static_cast<float>(heads));  // backend.cpu's rounding
  dsa_prepare_kernel<<<b.n_tokens, 128, sizeof(float2) * std::max(1, rope / 2), stream>>>(
      q, q_stride, k, k_stride, w, w_stride, heads, d, rope, static_cast<double>(theta), h_scale, kc, b, qrot, wsc,
      rinfo);
}

bool dsa_shape_supported(int heads, int d) {
  return heads > 0 && d > 0 && d % 4 == 0 && d <= 128 && int64_t{heads} * d <= 16384;
}

dsa_plan plan_dsa(int64_t rows, int heads, int d, int top_k, int64_t max_keys) {
  dsa_plan p;
  p.rows = rows;
  p.heads = heads;
  p.d = d;
  p.top_k = top_k;
  p.max_keys = std::max<int64_t>(max_keys, 1);
  const int64_t fit = static_cast<int64_t>(score_budget_bytes / (static_cast<size_t>(p.max_keys) * sizeof(float)));
  // At most 65535 rows: they are the scoring launch's grid.y.
  p.rows_per_batch = std::clamp<int64_t>(fit, 1, std::clamp<int64_t>(rows, 1, 65535));
  p.workspace_bytes = static_cast<size_t>(p.rows_per_batch) * p.max_keys * sizeof(float);
  return p;
}

}  // namespace tandem::cuda
