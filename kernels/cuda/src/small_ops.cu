// backend's small ops on the GPU (tandem_cuda/small_ops.hpp): attention_full, dynamic_conv
// and top_k, sized for DFlash2's drafter (8 query rows, 9 heads over 3 KV heads of 64 dims,
// up to a few thousand keys; 8 x 576 convolutions; top-16 of 7 rows of 49152 logits),
// where each op is one or two launches.
//
// attention_full: a block takes up to 32 query vectors of one KV head (rows x the heads that
// share it) and one range of keys. It stages the queries, then per tile of 32 keys the K and
// V rows in shared memory; lane j of each warp scores key j against the warp's (up to 4)
// queries, an online softmax (running max, rescaled sum and output) folds the tile in, and
// the warp's lanes accumulate p V over the output dims. One range: the block writes the
// normalised output; several: partials (max, sum, unnormalised output) that a merge kernel
// (one warp per (row, head)) combines.
//
// top_k: see the header. Keys of 64 bits, value bits then ~column, are all distinct, so the
// radix select ends with exactly k keys above or at the boundary: no tie handling at all.
#include <algorithm>
#include <cmath>

#include "common.cuh"
#include "tandem_cuda/small_ops.hpp"

namespace tandem::cuda {
namespace {

constexpr unsigned full_mask = 0xffffffffu;

// ---------------------------------------------------------------- attention_full

constexpr int af_threads = 256, af_warps = af_threads / 32;
constexpr int af_qpw = 4;                    // query vectors per warp
constexpr int af_qb = af_warps * af_qpw;     // query vectors per block
constexpr int af_kt = 32;                    // keys per tile (one per lane)
constexpr int af_min_tiles = 2;              // tiles per key range, at least

struct af_geom {
  int d4;       // head_dim rounded up to 4 (queries and keys are zero-padded to it)
  int kst4;     // K row stride in float4s: odd, so the lanes' 16-byte reads hit distinct banks
  size_t smem;  // bytes
};

af_geom af_geometry(int D) {
  af_geom g;
  g.d4 = (D + 3) / 4 * 4;
  g.kst4 = (g.d4 / 4) | 1;
  g.smem = sizeof(float) * (static_cast<size_t>(af_qb) * g.d4 + static_cast<size_t>(af_kt) * g.kst4 * 4 +
                            static_cast<size_t>(af_kt) * D + static_cast<size_t>(af_warps) * af_qpw * af_kt);
  return g;
}

// DPL: output dims per lane (head_dim <= 32 * DPL). Grid: (query tiles, key ranges, kv heads).
template <int DPL>
__global__ void __launch_bounds__(af_threads, 1)
    attention_full_kernel(const float* q, const float* __restrict__ k, const float* __restrict__ v,
                          float scale, int64_t n, int heads, int kv_heads, int D, int d4, int kst4, int64_t m,
                          int64_t keys_per_split, int splits, float* out, float2* __restrict__ part_ml,
                          float* __restrict__ part_o) {
  extern __shared__ float4 af_sm4[];
  float* q_s = reinterpret_cast<float*>(af_sm4);  // [af_qb][d4]
  float* k_s = q_s + af_qb * d4;                  // [af_kt][kst4 * 4]
  float* v_s = k_s + af_kt * kst4 * 4;            // [af_kt][D]
  float* p_s = v_s + af_kt * D;                   // [af_warps][af_qpw][af_kt]
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int group = heads / kv_heads, g = static_cast<int>(blockIdx.z), split = static_cast<int>(blockIdx.y);
  const int64_t nq = n * group;                   // query vectors of this kv head: (row, head in group)
  const int64_t q0 = static_cast<int64_t>(blockIdx.x) * af_qb;
  const int valid = static_cast<int>(std::min<int64_t>(af_qb, nq - q0));
  const int slots = (valid + af_warps - 1) / af_warps;  // query slots in use (block-uniform)
  // Query vector i of the block -> its (row, head) index r * heads + h.
  auto row_of = [&](int i) {
    const int64_t qi = q0 + i, r = qi / group;
    return r * heads + g * group + static_cast<int>(qi - r * group);
  };

  detail::pdl_wait();  // q, k and v come from earlier kernels
  detail::pdl_trigger();
  // Staging: warp w takes rows w, w + 8, w + 16, w + 24 (queries or keys), lane the dims
  // lane + 32 c (d4 <= 32 * DPL, so every padded dim is written, as 0).
  constexpr int rows_per_warp = af_qb / af_warps;
  static_assert(af_kt == af_qb, "one staging pattern for queries and keys");
#pragma unroll
  for (int r = 0; r < rows_per_warp; ++r) {
    const int i = warp + af_warps * r;
    const int64_t src = i < valid ? row_of(i) * D : 0;
#pragma unroll
    for (int c = 0; c < DPL; ++c) {
      const int d = lane + 32 * c;
      if (d < d4) q_s[i * d4 + d] = i < valid && d < D ? q[src + d] : 0.0f;
    }
  }

  const int64_t j0 = split * keys_per_split, j1 = std::min<int64_t>(m, j0 + keys_per_split);
  const int kw = kst4 * 4;
  const int64_t kv_stride = static_cast<int64_t>(kv_heads) * D;
  const float* kg = k + static_cast<int64_t>(g) * D;
  const float* vg = v + static_cast<int64_t>(g) * D;
  // The next tile's K and V rows in registers: loaded while the current tile is computed.
  float kreg[rows_per_warp][DPL], vreg[rows_per_warp][DPL];
  const auto load_tile = [&](int64_t t0) {
    const int nk = static_cast<int>(std::min<int64_t>(af_kt, j1 - t0));
#pragma unroll
    for (int r = 0; r < rows_per_warp; ++r) {
      const int j = warp + af_warps * r;
      const int64_t row = (t0 + (j < nk ? j : 0)) * kv_stride;
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const int d = lane + 32 * c;
        const bool ok = j < nk && d < D;
        kreg[r][c] = ok ? kg[row + d] : 0.0f;
        vreg[r][c] = ok ? vg[row + d] : 0.0f;
      }
    }
  };

  float o[af_qpw][DPL], mx[af_qpw], l[af_qpw];
#pragma unroll
  for (int s = 0; s < af_qpw; ++s) {
    mx[s] = -INFINITY;
    l[s] = 0.0f;
#pragma unroll
    for (int c = 0; c < DPL; ++c) o[s][c] = 0.0f;
  }

  load_tile(j0);  // j0 < j1: every key range has a key
  for (int64_t t0 = j0; t0 < j1; t0 += af_kt) {
    const int nk = static_cast<int>(std::min<int64_t>(af_kt, j1 - t0));
    __syncthreads();  // the previous tile's K, V and P are consumed (and q_s is staged)
#pragma unroll
    for (int r = 0; r < rows_per_warp; ++r) {
      const int j = warp + af_warps * r;
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const int d = lane + 32 * c;
        if (d < d4) k_s[j * kw + d] = kreg[r][c];
        if (d < D) v_s[j * D + d] = vreg[r][c];
      }
    }
    __syncthreads();
    if (t0 + af_kt < j1) load_tile(t0 + af_kt);

    // Scores: lane = key, the warp's query slots s = warp + af_warps * slot.
    float sc[af_qpw];
#pragma unroll
    for (int s = 0; s < af_qpw; ++s) sc[s] = 0.0f;
    const float4* kr = reinterpret_cast<const float4*>(k_s) + lane * kst4;
    const float4* q4 = reinterpret_cast<const float4*>(q_s);
    const int dq = d4 / 4;
#pragma unroll 4
    for (int i = 0; i < dq; ++i) {
      const float4 kk = kr[i];
#pragma unroll
      for (int s = 0; s < af_qpw; ++s) {
        if (s < slots) {
          const float4 qv = q4[(warp + af_warps * s) * dq + i];
          sc[s] = fmaf(qv.x, kk.x, sc[s]);
          sc[s] = fmaf(qv.y, kk.y, sc[s]);
          sc[s] = fmaf(qv.z, kk.z, sc[s]);
          sc[s] = fmaf(qv.w, kk.w, sc[s]);
        }
      }
    }
    float* pw = p_s + warp * af_qpw * af_kt;
#pragma unroll
    for (int s = 0; s < af_qpw; ++s) {
      if (s < slots) {
        const float x = lane < nk ? sc[s] * scale : -INFINITY;
        const float mnew = fmaxf(mx[s], detail::warp_max(x));
        // All scores so far -inf: exponents against 0 (every p and the rescale are 0).
        const float mref = mnew == -INFINITY ? 0.0f : mnew;
        const float alpha = expf(mx[s] - mref);
        const float p = lane < nk ? expf(x - mref) : 0.0f;
        l[s] = l[s] * alpha + detail::warp_sum(p);
        mx[s] = mnew;
#pragma unroll
        for (int c = 0; c < DPL; ++c) o[s][c] *= alpha;
        pw[s * af_kt + lane] = p;
      }
    }
    __syncwarp();
    // o += p V: lane owns dims lane + 32 c; keys past nk have p = 0 and V = 0.
#pragma unroll 4
    for (int j = 0; j < af_kt; ++j) {
      float vd[DPL];
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const int d = lane + 32 * c;
        vd[c] = d < D ? v_s[j * D + d] : 0.0f;
      }
#pragma unroll
      for (int s = 0; s < af_qpw; ++s) {
        if (s < slots) {
          const float pj = pw[s * af_kt + j];
#pragma unroll
          for (int c = 0; c < DPL; ++c) o[s][c] = fmaf(pj, vd[c], o[s][c]);
        }
      }
    }
  }

  const int64_t rows = n * heads;
#pragma unroll
  for (int s = 0; s < af_qpw; ++s) {
    const int i = warp + af_warps * s;
    if (s >= slots || i >= valid) continue;
    const int64_t row = row_of(i);
    if (splits == 1) {
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const int d = lane + 32 * c;
        if (d < D) out[row * D + d] = o[s][c] / l[s];
      }
    } else {
      float* po = part_o + (split * rows + row) * D;
#pragma unroll
      for (int c = 0; c < DPL; ++c) {
        const int d = lane + 32 * c;
        if (d < D) po[d] = o[s][c];
      }
      if (lane == 0) part_ml[split * rows + row] = make_float2(mx[s], l[s]);
    }
  }
}

constexpr int merge_warps = 8;

// One warp per (row, head): the ranges' partials rescaled to the common max and summed.
__global__ void __launch_bounds__(merge_warps * 32)
    attention_full_merge_kernel(const float2* __restrict__ part_ml, const float* __restrict__ part_o, int splits,
                                int64_t rows, int D, float* __restrict__ out) {
  extern __shared__ float merge_w[];  // [merge_warps][splits]
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  detail::pdl_wait();  // the partials come from attention_full_kernel
  detail::pdl_trigger();
  const int64_t row = static_cast<int64_t>(blockIdx.x) * merge_warps + warp;
  if (row >= rows) return;  // the whole warp; no block barrier follows
  float* w = merge_w + warp * splits;
  float M = -INFINITY;
  for (int s = lane; s < splits; s += 32) M = fmaxf(M, part_ml[s * rows + row].x);
  M = detail::warp_max(M);
  const float mref = M == -INFINITY ? 0.0f : M;
  float L = 0.0f;
  for (int s = lane; s < splits; s += 32) {
    const float2 a = part_ml[s * rows + row];
    const float e = expf(a.x - mref);
    w[s] = e;
    L += a.y * e;
  }
  L = detail::warp_sum(L);
  __syncwarp();
  for (int d = lane; d < D; d += 32) {
    float acc = 0.0f;
    for (int s = 0; s < splits; ++s) acc = fmaf(w[s], part_o[(s * rows + row) * D + d], acc);
    out[row * D + d] = acc / L;
  }
}

template <int DPL>
void launch_attention_full(const attention_full_plan& p, const af_geom& geo, const float* q, const float* k,
                           const float* v, float scale, float* out, float2* ml, float* po, cudaStream_t stream) {
  const int64_t nq = p.n * (p.heads / p.kv_heads);
  const dim3 grid(static_cast<unsigned>((nq + af_qb - 1) / af_qb), static_cast<unsigned>(p.splits),
                  static_cast<unsigned>(p.kv_heads));
  if (geo.smem > 48 * 1024)
    cudaFuncSetAttribute(attention_full_kernel<DPL>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                         static_cast<int>(geo.smem));
  detail::launch_pdl(attention_full_kernel<DPL>, grid, dim3(af_threads), geo.smem, stream, q, k, v, scale, p.n,
                     static_cast<int>(p.heads), static_cast<int>(p.kv_heads), static_cast<int>(p.head_dim), geo.d4,
                     geo.kst4, p.m, p.keys_per_split, p.splits, out, ml, po);
}

// ---------------------------------------------------------------- dynamic_conv

// One thread per output element. __fmul_rn / __fadd_rn keep nvcc from contracting into fma:
// the host default's roundings, bit for bit (w0 x + 0 on the first row, as it adds 0.0f).
__global__ void dynamic_conv_kernel(const float* __restrict__ x, const float* __restrict__ taps,
                                    const float* __restrict__ base, int64_t n, int64_t d, int64_t size,
                                    int64_t groups, float* __restrict__ out) {
  detail::pdl_wait();
  detail::pdl_trigger();
  const int64_t total = n * d;
  for (int64_t i = blockIdx.x * int64_t{blockDim.x} + threadIdx.x; i < total;
       i += int64_t{gridDim.x} * blockDim.x) {
    const int64_t r = i / d, c = i - r * d, g = c / size;
    const float* t = taps + r * 2 * groups + 2 * g;
    const float w0 = __fadd_rn(base[2 * g], t[0]);
    const float a = __fmul_rn(w0, x[i]);
    float y;
    if (r > 0) {
      const float w1 = __fadd_rn(base[2 * g + 1], t[1]);
      y = __fadd_rn(a, __fmul_rn(w1, x[i - d]));
    } else {
      y = __fadd_rn(a, 0.0f);
    }
    out[i] = y;
  }
}

// ---------------------------------------------------------------- top_k

using u64 = unsigned long long;

constexpr int tk_seg_threads = 256, tk_merge_threads = 512;
constexpr int64_t tk_min_seg = 2048;  // columns a segment block takes at least
constexpr int tk_max_segments = 128;  // segments a row is cut into at most

// Larger key = larger value; NaN ranks as -inf and -0 as +0 (they compare equal).
__device__ __forceinline__ uint32_t order_key(float f) {
  if (isnan(f)) f = -INFINITY;
  if (f == 0.0f) f = 0.0f;
  const uint32_t u = __float_as_uint(f);
  return u ^ ((u >> 31) != 0 ? 0xffffffffu : 0x80000000u);
}
// (value, column) as one key: larger is better, equal values rank the lower column higher.
// Every real key is >= 2^32 (order_key never gives 0), so 0 pads below all of them.
__device__ __forceinline__ u64 rank_key(uint32_t u, int64_t col) {
  return (static_cast<u64>(u) << 32) | (0xffffffffu - static_cast<uint32_t>(col));
}
__device__ __forceinline__ int32_t column_of(u64 key) {
  return static_cast<int32_t>(0xffffffffu - static_cast<uint32_t>(key & 0xffffffffu));
}

struct select_smem {
  unsigned hist[256];
  u64 list[top_k_max_k];
  u64 prefix;
  int remaining, done, taken;
};

// The k largest of key_at(0 .. count) into sh.list, in no particular order. The keys are
// distinct, except for 0 pads of which there are never more than count - k real keys above
// (so no pad is among the k largest). 1 <= k <= min(count, top_k_max_k). Every thread of
// the block calls it; it ends with a barrier.
//
// Digit passes from the top byte down: a histogram of the digit over the keys that match
// the chosen prefix so far, then the digit holding the remaining-th largest. As soon as
// that digit's keys are all needed, the selection is {key : key's top bits >= prefix}
// (those above are taken as a whole); with distinct keys that happens at the last byte
// at the latest.
template <int THREADS, class KeyAt>
__device__ void block_select(KeyAt key_at, int count, int k, select_smem& sh) {
  const int tid = threadIdx.x, lane = tid & 31;
  if (tid == 0) {
    sh.prefix = 0;
    sh.remaining = k;
    sh.done = 0;
    sh.taken = 0;
  }
  u64 prefix = 0, mask = 0;
  for (int shift = 56; shift >= 0; shift -= 8) {
    for (int i = tid; i < 256; i += THREADS) sh.hist[i] = 0;
    __syncthreads();
    for (int base = 0; base < count; base += THREADS) {  // block-uniform trip count
      const int i = base + tid;
      unsigned bin = 256;
      if (i < count) {
        const u64 key = key_at(i);
        if ((key & mask) == prefix) bin = static_cast<unsigned>(key >> shift) & 0xffu;
      }
      if (__any_sync(full_mask, bin < 256)) {
        const unsigned peers = __match_any_sync(full_mask, bin);
        if (bin < 256 && lane == __ffs(peers) - 1) atomicAdd(&sh.hist[bin], static_cast<unsigned>(__popc(peers)));
      }
    }
    __syncthreads();
    if (tid < 32) {
      // Lane L holds bins 255 - 8L down to 248 - 8L; an inclusive sum over the lanes
      // counts the keys at or above each lane's lowest bin.
      const unsigned remaining = static_cast<unsigned>(sh.remaining);
      unsigned c[8], tot = 0;
#pragma unroll
      for (int b = 0; b < 8; ++b) {
        c[b] = sh.hist[255 - 8 * lane - b];
        tot += c[b];
      }
      unsigned incl = tot;
#pragma unroll
      for (int o = 1; o < 32; o <<= 1) {
        const unsigned y = __shfl_up_sync(full_mask, incl, o);
        if (lane >= o) incl += y;
      }
      const unsigned hit = __ballot_sync(full_mask, incl >= remaining);
      if (hit != 0 && lane == __ffs(hit) - 1) {
        unsigned above = incl - tot;
#pragma unroll
        for (int b = 0; b < 8; ++b) {
          if (above + c[b] >= remaining) {
            sh.prefix = prefix | (static_cast<u64>(255 - 8 * lane - b) << shift);
            sh.remaining = static_cast<int>(remaining - above);
            sh.done = c[b] == remaining - above;
            break;
          }
          above += c[b];
        }
      }
    }
    __syncthreads();
    prefix = sh.prefix;
    mask |= u64{0xff} << shift;
    if (sh.done) break;  // block-uniform
  }
  for (int i = tid; i < count; i += THREADS) {
    const u64 key = key_at(i);
    if ((key & mask) >= prefix) {
      const int slot = atomicAdd(&sh.taken, 1);
      if (slot < k) sh.list[slot] = key;  // exactly k arrive; the guard only protects the list
    }
  }
  __syncthreads();
}

// sh.list's k keys, largest first: ids and values (read from the row, bit for bit).
__device__ __forceinline__ void write_sorted(const select_smem& sh, int k, const float* xr, int32_t* ids,
                                             float* values) {
  for (int j = threadIdx.x; j < k; j += blockDim.x) {
    const u64 key = sh.list[j];
    int rank = 0;
    for (int i = 0; i < k; ++i) rank += sh.list[i] > key ? 1 : 0;
    const int32_t col = column_of(key);
    ids[rank] = col;
    values[rank] = xr[col];
  }
}

// Grid: (rows, segments). The segment's order keys are cached in shared memory (seg_len).
__global__ void __launch_bounds__(tk_seg_threads)
    top_k_segment_kernel(const float* __restrict__ x, int64_t m, int k, int64_t seg_len, int segments,
                         int32_t* __restrict__ ids, float* __restrict__ values, u64* __restrict__ cand) {
  extern __shared__ uint32_t tk_cache[];
  __shared__ select_smem sh;
  detail::pdl_wait();  // x comes from an earlier kernel
  detail::pdl_trigger();
  const int64_t r = blockIdx.x, c0 = static_cast<int64_t>(blockIdx.y) * seg_len;
  const int count = static_cast<int>(std::min<int64_t>(seg_len, m - c0));
  const float* xr = x + r * m;
  for (int i = threadIdx.x; i < count; i += tk_seg_threads) tk_cache[i] = order_key(xr[c0 + i]);
  __syncthreads();
  const int kk = k < count ? k : count;
  block_select<tk_seg_threads>([&](int i) { return rank_key(tk_cache[i], c0 + i); }, count, kk, sh);
  if (segments == 1) {
    write_sorted(sh, k, xr, ids + r * k, values + r * k);
  } else {
    u64* out = cand + (r * segments + blockIdx.y) * k;
    for (int j = threadIdx.x; j < k; j += tk_seg_threads) out[j] = j < kk ? sh.list[j] : 0ull;
  }
}

// One block per row: the k largest of its segments' candidates.
__global__ void __launch_bounds__(tk_merge_threads)
    top_k_merge_kernel(const float* __restrict__ x, int64_t m, int k, int segments, const u64* __restrict__ cand,
                       int32_t* __restrict__ ids, float* __restrict__ values) {
  __shared__ select_smem sh;
  detail::pdl_wait();  // the candidates come from top_k_segment_kernel
  detail::pdl_trigger();
  const int64_t r = blockIdx.x;
  const u64* cr = cand + r * segments * k;
  block_select<tk_merge_threads>([&](int i) { return cr[i]; }, segments * k, k, sh);
  write_sorted(sh, k, x + r * m, ids + r * k, values + r * k);
}

}  // namespace

// ---------------------------------------------------------------- launchers

attention_full_plan plan_attention_full(int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t m,
                                        int sms) {
  attention_full_plan p;
  p.n = n, p.heads = heads, p.kv_heads = kv_heads, p.head_dim = head_dim, p.m = m;
  // About one block per SM over the kv heads (n plays no part: see the header), at least
  // af_min_tiles tiles of keys each.
  const int64_t tiles = (m + af_kt - 1) / af_kt;
  const int64_t per_head = std::clamp<int64_t>(sms / std::max<int64_t>(kv_heads, 1), 1, 512);
  const int64_t tps = std::max<int64_t>(af_min_tiles, (tiles + per_head - 1) / per_head);
  p.splits = static_cast<int>((tiles + tps - 1) / tps);
  p.keys_per_split = tps * af_kt;
  if (p.splits > 1)
    p.part_bytes = static_cast<size_t>(p.splits) * static_cast<size_t>(n * heads) *
                   (sizeof(float2) + static_cast<size_t>(head_dim) * sizeof(float));
  return p;
}

size_t attention_full_smem_bytes(int64_t head_dim) { return af_geometry(static_cast<int>(head_dim)).smem; }

void attention_full(const attention_full_plan& p, const float* q, const float* k, const float* v, float scale,
                    float* out, void* part, cudaStream_t stream) {
  if (p.n == 0 || p.heads == 0) return;
  const int D = static_cast<int>(p.head_dim);
  const af_geom geo = af_geometry(D);
  const int64_t rows = p.n * p.heads;
  auto* ml = static_cast<float2*>(part);
  float* po = p.splits > 1 ? reinterpret_cast<float*>(ml + p.splits * rows) : nullptr;
  if (D <= 32) launch_attention_full<1>(p, geo, q, k, v, scale, out, ml, po, stream);
  else if (D <= 64) launch_attention_full<2>(p, geo, q, k, v, scale, out, ml, po, stream);
  else if (D <= 128) launch_attention_full<4>(p, geo, q, k, v, scale, out, ml, po, stream);
  else launch_attention_full<8>(p, geo, q, k, v, scale, out, ml, po, stream);
  if (p.splits > 1) {
    const auto blocks = static_cast<unsigned>((rows + merge_warps - 1) / merge_warps);
    const size_t smem = sizeof(float) * merge_warps * static_cast<size_t>(p.splits);
    detail::launch_pdl(attention_full_merge_kernel, dim3(blocks), dim3(merge_warps * 32), smem, stream,
                       static_cast<const float2*>(ml), static_cast<const float*>(po), p.splits, rows, D, out);
  }
}

void dynamic_conv(const float* x, const float* taps, const float* base, int64_t n, int64_t d, int64_t groups,
                  float* out, cudaStream_t stream) {
  if (n == 0 || d == 0) return;
  const int64_t total = n * d;
  const auto blocks = static_cast<unsigned>(std::min<int64_t>((total + 255) / 256, 4096));
  detail::launch_pdl(dynamic_conv_kernel, dim3(blocks), dim3(256), 0, stream, x, taps, base, n, d, d / groups, groups,
                     out);
}

top_k_plan plan_top_k(int64_t n, int64_t m, int k) {
  top_k_plan p;
  p.n = n, p.m = m, p.k = k;
  // Segments of at least tk_min_seg columns, in multiples of 256, at most tk_max_segments of
  // them (2^20 columns: 128 of 8192, whose order keys take 32 KiB of shared memory).
  const int64_t want = (m + tk_max_segments - 1) / tk_max_segments;
  p.seg_len = std::max<int64_t>(tk_min_seg, (want + 255) / 256 * 256);
  p.segments = static_cast<int>((m + p.seg_len - 1) / p.seg_len);
  if (p.segments > 1)
    p.workspace_bytes = static_cast<size_t>(n) * static_cast<size_t>(p.segments) * static_cast<size_t>(k) * sizeof(u64);
  return p;
}

void top_k(const top_k_plan& p, const float* x, int32_t* ids, float* values, void* workspace, cudaStream_t stream) {
  if (p.n == 0) return;
  const size_t cache = static_cast<size_t>(std::min(p.seg_len, p.m)) * sizeof(uint32_t);
  const dim3 grid(static_cast<unsigned>(p.n), static_cast<unsigned>(p.segments));
  auto* cand = static_cast<u64*>(workspace);
  detail::launch_pdl(top_k_segment_kernel, grid, dim3(tk_seg_threads), cache, stream, x, p.m, p.k, p.seg_len,
                     p.segments, ids, values, cand);
  if (p.segments > 1)
    detail::launch_pdl(top_k_merge_kernel, dim3(static_cast<unsigned>(p.n)), dim3(tk_merge_threads), 0, stream, x, p.m,
                       p.k, p.segments, static_cast<const u64*>(cand), ids, values);
}

}  // namespace tandem::cuda
