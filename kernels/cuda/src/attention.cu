// Paged attention over the KV pool: the KV write and a flash-style kernel for any batch
// (prefill chunks). Decode is in attention_decode.cu.
//
// The KV write rounds k and v to the pool's element type (kv_elem.cuh); the attention
// kernel widens each stored key and value to fp32 and keeps fp32 throughout, so it matches
// the reference on the stored values up to summation order and the online-softmax rescaling.
#include <cfloat>
#include <climits>

#include "common.cuh"
#include "kv_elem.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

__device__ __forceinline__ int64_t slot_of(const dev_batch& b, const dev_kv& kv, int s, int t) {
  const int32_t page = b.page_table[int64_t{s} * b.max_pages + t / kv.page_size];
  if (page < 0 || page >= kv.n_pages) return -1;
  return int64_t{page} * kv.page_size + t % kv.page_size;
}

template <kv_elem E>
__global__ void kv_write_kernel(const float* k, const float* v, dev_batch b, dev_kv kv) {
  const int r = blockIdx.x;
  const int64_t ts = int64_t{kv.n_kv_heads} * kv.head_dim;
  const int64_t slot = b.slot_mapping[r];
  if (slot < 0 || slot >= kv.n_pages * kv.page_size) return;
  auto* pk = static_cast<detail::kv_t<E>*>(kv.k);
  auto* pv = static_cast<detail::kv_t<E>*>(kv.v);
  for (int64_t j = threadIdx.x; j < ts; j += blockDim.x) {
    pk[slot * ts + j] = detail::kv_store<E>(k[r * ts + j]);
    pv[slot * ts + j] = detail::kv_store<E>(v[r * ts + j]);
  }
}

// Four elements of the pool (4-element aligned) widened to f32.
template <kv_elem E>
__device__ __forceinline__ float4 load4(const void* pool, int64_t at) {
  float x[4];
  detail::kv_load_n<E, 4>(static_cast<const detail::kv_t<E>*>(pool) + at, x);
  return make_float4(x[0], x[1], x[2], x[3]);
}

// Block = 64 consecutive query rows of the flattened batch, one query head. Rows of one
// sequence share each K/V tile in shared memory; a block whose rows span sequences takes
// them one sequence at a time.
template <int HD, kv_elem E>
__global__ void __launch_bounds__(64) prefill_kernel(const float* __restrict__ q, int n_heads,
                                                     dev_kv kv, dev_batch b, float scale,
                                                     float* __restrict__ out) {
  constexpr int KT = HD == 64 ? 64 : 32;
  __shared__ float4 ks[KT][HD / 4], vs[KT][HD / 4];
  __shared__ int cur_seq, max_ctx;
  const int h = blockIdx.y, kvh = h / (n_heads / kv.n_kv_heads);
  const int r = blockIdx.x * 64 + threadIdx.x;
  int s = INT_MAX, ctx = 0;
  if (r < b.n_tokens) {
    int lo = 0, hi = b.n_seqs - 1;  // the last s with query_start[s] <= r
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (b.query_start[mid] <= r) lo = mid; else hi = mid - 1;
    }
    s = lo;
    const int n_new = b.query_start[s + 1] - b.query_start[s];
    ctx = b.seq_lens[s] - n_new + (r - b.query_start[s]) + 1;
  }
  float qr[HD], acc[HD];
  const float* qrow = q + (int64_t{r} * n_heads + h) * HD;
#pragma unroll
  for (int d = 0; d < HD; ++d) {
    qr[d] = s != INT_MAX ? qrow[d] : 0.0f;
    acc[d] = 0.0f;
  }
  float m = -INFINITY, l = 0.0f;
  bool done = s == INT_MAX;
  const int64_t ts = int64_t{kv.n_kv_heads} * HD;
  for (;;) {
    if (threadIdx.x == 0) cur_seq = INT_MAX, max_ctx = 0;
    __syncthreads();
    if (!done) atomicMin(&cur_seq, s);
    __syncthreads();
    const int cs = cur_seq;
    if (cs == INT_MAX) break;
    const bool mine = !done && s == cs;
    if (mine) atomicMax(&max_ctx, ctx);
    __syncthreads();
    const int mc = max_ctx;
    for (int t0 = 0; t0 < mc; t0 += KT) {
      for (int i = threadIdx.x; i < KT * HD / 4; i += 64) {
        const int key = i / (HD / 4), c = i % (HD / 4), t = t0 + key;
        const int64_t slot = t < mc ? slot_of(b, kv, cs, t) : -1;
        const float4 zero = make_float4(0.f, 0.f, 0.f, 0.f);
        ks[key][c] = slot >= 0 ? load4<E>(kv.k, slot * ts + kvh * HD + 4 * c) : zero;
        vs[key][c] = slot >= 0 ? load4<E>(kv.v, slot * ts + kvh * HD + 4 * c) : zero;
      }
      __syncthreads();
      if (mine && t0 < ctx) {
        float sc[KT];
        float tmax = -INFINITY;
#pragma unroll
        for (int j = 0; j < KT; ++j) {
          float dot = 0.0f;
#pragma unroll
          for (int c = 0; c < HD / 4; ++c) {
            const float4 k4 = ks[j][c];
            dot = fmaf(qr[4 * c], k4.x, dot);
            dot = fmaf(qr[4 * c + 1], k4.y, dot);
            dot = fmaf(qr[4 * c + 2], k4.z, dot);
            dot = fmaf(qr[4 * c + 3], k4.w, dot);
          }
          sc[j] = t0 + j < ctx ? dot * scale : -INFINITY;
          tmax = fmaxf(tmax, sc[j]);
        }
        const float m_new = fmaxf(m, tmax);
        const float corr = expf(m - m_new);
        l *= corr;
#pragma unroll
        for (int d = 0; d < HD; ++d) acc[d] *= corr;
#pragma unroll
        for (int j = 0; j < KT; ++j) {
          const float p = expf(sc[j] - m_new);
          l += p;
#pragma unroll
          for (int c = 0; c < HD / 4; ++c) {
            const float4 v4 = vs[j][c];
            acc[4 * c] = fmaf(p, v4.x, acc[4 * c]);
            acc[4 * c + 1] = fmaf(p, v4.y, acc[4 * c + 1]);
            acc[4 * c + 2] = fmaf(p, v4.z, acc[4 * c + 2]);
            acc[4 * c + 3] = fmaf(p, v4.w, acc[4 * c + 3]);
          }
        }
        m = m_new;
      }
      __syncthreads();
    }
    if (mine) {
      float* o = out + (int64_t{r} * n_heads + h) * HD;
      const float inv = 1.0f / l;
#pragma unroll
      for (int d = 0; d < HD; ++d) o[d] = acc[d] * inv;
      done = true;
    }
  }
}

}  // namespace

bool attention_head_dim_supported(int head_dim) { return head_dim == 64 || head_dim == 128; }

int kv_elem_bytes(kv_elem e) {
  int bytes = 4;
  detail::with_kv_elem(e, [&](auto et) { bytes = detail::kv_bytes<decltype(et)::value>; });
  return bytes;
}

void kv_write(const float* k, const float* v, const dev_batch& b, const dev_kv& kv,
              cudaStream_t stream) {
  if (b.n_tokens == 0) return;
  detail::with_kv_elem(kv.type, [&](auto et) {
    kv_write_kernel<decltype(et)::value><<<b.n_tokens, 128, 0, stream>>>(k, v, b, kv);
  });
}

void attention_prefill(const float* q, int n_heads, const dev_kv& kv, const dev_batch& b,
                       float scale, float* out, cudaStream_t stream) {
  if (b.n_tokens == 0) return;
  const dim3 grid(detail::blocks_for(b.n_tokens, 64), static_cast<unsigned>(n_heads));
  detail::with_kv_elem(kv.type, [&](auto et) {
    constexpr kv_elem E = decltype(et)::value;
    if (kv.head_dim == 64) prefill_kernel<64, E><<<grid, 64, 0, stream>>>(q, n_heads, kv, b, scale, out);
    else prefill_kernel<128, E><<<grid, 64, 0, stream>>>(q, n_heads, kv, b, scale, out);
  });
}

}  // namespace tandem::cuda
