// Token sampling on the GPU with the reference's semantics (tandem_ref/sampling.hpp):
// argmax for greedy rows; otherwise double weights exp((l - max) / T), a stable descending
// radix sort per row (ranks ties by id, as the reference), top-k / top-p / min-p cuts on the
// ranked prefix, and the Philox draw walked in ascending id order.
#include <cub/device/device_segmented_radix_sort.cuh>

#include <algorithm>
#include <cfloat>
#include <climits>

#include "common.cuh"
#include "tandem_cuda/kernels.hpp"
#include "tandem_ref/philox.hpp"

namespace tandem::cuda {
namespace {

constexpr int threads = 1024;

struct sampler_ws {
  double *w, *w_sorted;
  int32_t *ids, *ids_sorted, *offsets, *status;
  uint8_t* kept;
  void* temp;
  size_t temp_bytes;
};

size_t align_up(size_t x) { return (x + 255) / 256 * 256; }

size_t cub_temp_bytes(int64_t m, int vocab) {
  size_t bytes = 0;
  cub::DeviceSegmentedRadixSort::SortPairsDescending(
      nullptr, bytes, static_cast<const double*>(nullptr), static_cast<double*>(nullptr),
      static_cast<const int32_t*>(nullptr), static_cast<int32_t*>(nullptr), m * vocab,
      static_cast<int>(m), static_cast<const int32_t*>(nullptr), static_cast<const int32_t*>(nullptr));
  return bytes;
}

sampler_ws carve(void* base, int64_t m, int vocab) {
  auto* p = static_cast<char*>(base);
  const size_t n = static_cast<size_t>(m) * vocab;
  sampler_ws ws{};
  ws.w = reinterpret_cast<double*>(p), p += align_up(n * 8);
  ws.w_sorted = reinterpret_cast<double*>(p), p += align_up(n * 8);
  ws.ids = reinterpret_cast<int32_t*>(p), p += align_up(n * 4);
  ws.ids_sorted = reinterpret_cast<int32_t*>(p), p += align_up(n * 4);
  ws.offsets = reinterpret_cast<int32_t*>(p), p += align_up((m + 1) * 4);
  ws.status = reinterpret_cast<int32_t*>(p), p += align_up(m * 4);
  ws.kept = reinterpret_cast<uint8_t*>(p), p += align_up(n);
  ws.temp = p;
  ws.temp_bytes = cub_temp_bytes(m, vocab);
  return ws;
}

struct best { float v; int32_t i; };

__device__ best better(best a, best b) {
  if (a.i < 0) return b;
  if (b.i < 0) return a;
  return (b.v > a.v || (b.v == a.v && b.i < a.i)) ? b : a;
}

__global__ void __launch_bounds__(threads) argmax_kernel(const float* logits, int vocab, int32_t* ids) {
  __shared__ best red[32];
  const float* row = logits + int64_t{blockIdx.x} * vocab;
  best b{0.0f, -1};
  for (int i = threadIdx.x; i < vocab; i += threads) {
    if (!isnan(row[i])) b = better(b, best{row[i], i});
  }
  for (int o = 16; o > 0; o >>= 1) {
    best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = b;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < threads / 32; ++w) b = better(b, red[w]);
    const bool finite = b.i >= 0 && (isfinite(b.v) || b.v == INFINITY);
    ids[blockIdx.x] = finite ? b.i : -1;
  }
}

// Multi-block argmax: block (row, part) reduces `chunk` logits of its row; the last block of
// a row to finish (ticket counter, reset by that block) merges the parts' results. Merging
// keeps the largest value and the lowest id among equal ones, so the result is the
// single-block kernel's whatever order the parts finish in.
constexpr int split_threads = 256;
constexpr int split_chunk = 2048;  // logits per block (8 per thread)
constexpr int split_max_parts = 256;

int split_parts(int vocab) {
  return std::max(1, std::min(split_max_parts, (vocab + split_chunk - 1) / split_chunk));
}

size_t split_ticket_bytes(int64_t m) { return align_up(static_cast<size_t>(m) * 4); }

// The best of the block's `b`s, in thread 0.
__device__ best block_best(best b, best* red) {
  for (int o = 16; o > 0; o >>= 1) {
    best other{__shfl_xor_sync(0xffffffffu, b.v, o), __shfl_xor_sync(0xffffffffu, b.i, o)};
    b = better(b, other);
  }
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = b;
  __syncthreads();
  if (threadIdx.x == 0)
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) b = better(b, red[w]);
  return b;
}

__global__ void __launch_bounds__(split_threads) argmax_split_kernel(const float* logits, int vocab, int chunk,
                                                                     int32_t* ids, best* parts,
                                                                     unsigned int* tickets) {
  __shared__ best red[split_threads / 32];
  __shared__ bool last;
  const int64_t r = blockIdx.x;
  const int p = blockIdx.y, n_parts = gridDim.y;
  const float* row = logits + r * vocab;
  const int end = min(vocab, (p + 1) * chunk);
  best b{0.0f, -1};
#pragma unroll 8
  for (int i = p * chunk + threadIdx.x; i < end; i += split_threads) {
    const float v = row[i];
    if (!isnan(v)) b = better(b, best{v, i});
  }
  b = block_best(b, red);
  if (threadIdx.x == 0) {
    parts[r * n_parts + p] = b;
    __threadfence();  // the part is visible before the ticket says so
    last = atomicAdd(&tickets[r], 1u) == static_cast<unsigned int>(n_parts - 1);
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  best m{0.0f, -1};
  for (int q = threadIdx.x; q < n_parts; q += split_threads) {
    const best* src = parts + r * n_parts + q;
    m = better(m, best{__ldcg(&src->v), __ldcg(&src->i)});  // from L2: other blocks wrote them
  }
  m = block_best(m, red);
  if (threadIdx.x == 0) {
    const bool finite = m.i >= 0 && (isfinite(m.v) || m.v == INFINITY);
    ids[r] = finite ? m.i : -1;
    tickets[r] = 0;  // ready for the next launch
  }
}

__device__ float block_max(float v, float* red) {
  v = detail::warp_max(v);
  __syncthreads();
  if ((threadIdx.x & 31) == 0) red[threadIdx.x >> 5] = v;
  __syncthreads();
  v = red[threadIdx.x & 31];
  return detail::warp_max(v);
}

__global__ void __launch_bounds__(threads) weights_kernel(const float* logits, int vocab,
                                                          const dev_sampling* params, sampler_ws ws) {
  __shared__ float red[32];
  const int64_t r = blockIdx.x;
  const float* row = logits + r * vocab;
  double* w = ws.w + r * vocab;
  int32_t* ids = ws.ids + r * vocab;
  if (threadIdx.x == 0) ws.offsets[r] = static_cast<int32_t>(r * vocab);
  if (threadIdx.x == 0 && r == gridDim.x - 1) ws.offsets[r + 1] = static_cast<int32_t>((r + 1) * vocab);
  float mx = -INFINITY;
  for (int i = threadIdx.x; i < vocab; i += threads) if (!isnan(row[i])) mx = fmaxf(mx, row[i]);
  mx = block_max(mx, red);
  const dev_sampling p = params[r];
  const bool usable = !p.greedy && mx > -INFINITY;
  if (threadIdx.x == 0) ws.status[r] = mx > -INFINITY ? 1 : 0;
  for (int i = threadIdx.x; i < vocab; i += threads) {
    const float l = row[i];
    double v = 0.0;
    if (usable && !isnan(l) && l != -INFINITY)
      v = mx == INFINITY ? (l == INFINITY ? 1.0 : 0.0) : exp((static_cast<double>(l) - mx) / p.temperature);
    w[i] = v;
    ids[i] = i;
  }
}

// Exclusive scan of one double per thread (block of `threads`), via shared memory.
__device__ double block_exclusive_scan(double v, double* buf, double* total) {
  buf[threadIdx.x] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    double run = 0.0;
    for (int i = 0; i < threads; ++i) {
      const double x = buf[i];
      buf[i] = run;
      run += x;
    }
    buf[threads] = run;
  }
  __syncthreads();
  const double out = buf[threadIdx.x];
  *total = buf[threads];
  __syncthreads();
  return out;
}

// First index in [0, n) where the running sum of f(i) reaches the target (pred(cum)), or -1.
template <class F, class P>
__device__ int first_crossing(int n, F f, P pred, double* buf) {
  const int per = (n + threads - 1) / threads;
  const int c0 = min(n, threadIdx.x * per), c1 = min(n, c0 + per);
  double local = 0.0;
  for (int i = c0; i < c1; ++i) local += f(i);
  double total = 0.0;
  double cum = block_exclusive_scan(local, buf, &total);
  __shared__ int found;
  if (threadIdx.x == 0) found = INT_MAX;
  __syncthreads();
  for (int i = c0; i < c1; ++i) {
    cum += f(i);
    if (pred(cum)) {
      atomicMin(&found, i);
      break;
    }
  }
  __syncthreads();
  return found == INT_MAX ? -1 : found;
}

__global__ void __launch_bounds__(threads) select_kernel(int vocab, const dev_sampling* params,
                                                         sampler_ws ws, int32_t* out_ids) {
  __shared__ double buf[threads + 1];
  __shared__ int n_pos, n_min;
  const int64_t r = blockIdx.x;
  const dev_sampling p = params[r];
  if (p.greedy) return;
  if (ws.status[r] == 0) {
    if (threadIdx.x == 0) out_ids[r] = -1;
    return;
  }
  const double* ks = ws.w_sorted + r * vocab;
  const int32_t* sorted = ws.ids_sorted + r * vocab;
  const double* w = ws.w + r * vocab;
  uint8_t* kept = ws.kept + r * vocab;
  if (threadIdx.x == 0) {  // sorted descending: positive weights are a prefix
    int lo = 0, hi = vocab;
    while (lo < hi) { const int mid = (lo + hi) / 2; if (ks[mid] > 0.0) lo = mid + 1; else hi = mid; }
    n_pos = lo;
  }
  __syncthreads();
  int keep = n_pos;
  if (p.top_k > 0 && p.top_k < keep) keep = p.top_k;
  if (p.top_p < 1.0f) {
    double total = 0.0;
    const int per = (keep + threads - 1) / threads;
    double local = 0.0;
    for (int i = min(keep, threadIdx.x * per); i < min(keep, threadIdx.x * per + per); ++i) local += ks[i];
    block_exclusive_scan(local, buf, &total);
    const double target = static_cast<double>(p.top_p) * total;
    const int cut = first_crossing(keep, [&](int i) { return ks[i]; }, [&](double c) { return c >= target; }, buf);
    if (cut >= 0) keep = cut + 1;
  }
  if (threadIdx.x == 0) {  // min-p keeps a ranked prefix too
    int n = keep;
    if (p.min_p > 0.0f) {
      const double thr = static_cast<double>(p.min_p) * ks[0];
      int lo = 0, hi = keep;
      while (lo < hi) { const int mid = (lo + hi) / 2; if (!(ks[mid] < thr)) lo = mid + 1; else hi = mid; }
      n = lo;
    }
    n_min = n;
  }
  for (int i = threadIdx.x; i < vocab; i += threads) kept[i] = 0;
  __syncthreads();
  const int n_kept = n_min;
  for (int i = threadIdx.x; i < n_kept; i += threads) kept[sorted[i]] = 1;
  __syncthreads();
  double mass = 0.0;
  auto kept_w = [&](int i) { return kept[i] ? w[i] : 0.0; };
  {
    const int per = (vocab + threads - 1) / threads;
    double local = 0.0;
    for (int i = min(vocab, threadIdx.x * per); i < min(vocab, threadIdx.x * per + per); ++i) local += kept_w(i);
    block_exclusive_scan(local, buf, &mass);
  }
  const double target = static_cast<double>(tandem::ref::uniform01(p.seed, p.step)) * mass;
  const int id = first_crossing(vocab, kept_w, [&](double c) { return c > target; }, buf);
  if (threadIdx.x == 0) {
    int last = -1;
    if (id < 0) for (int i = vocab - 1; i >= 0 && last < 0; --i) if (kept[i]) last = i;
    out_ids[r] = id >= 0 ? id : last;
  }
}

}  // namespace

void argmax_rows(const float* logits, int64_t m, int vocab, int32_t* ids, cudaStream_t stream) {
  if (m > 0) argmax_kernel<<<static_cast<unsigned>(m), threads, 0, stream>>>(logits, vocab, ids);
}

size_t argmax_workspace_bytes(int64_t m, int vocab) {
  return split_ticket_bytes(m) + static_cast<size_t>(m) * split_parts(vocab) * sizeof(best);
}

void argmax_rows(const float* logits, int64_t m, int vocab, int32_t* ids, void* ws, cudaStream_t stream) {
  if (m <= 0) return;
  auto* tickets = static_cast<unsigned int*>(ws);
  auto* parts = reinterpret_cast<best*>(static_cast<char*>(ws) + split_ticket_bytes(m));
  const int n_parts = split_parts(vocab);
  const int chunk = (vocab + n_parts - 1) / n_parts;
  argmax_split_kernel<<<dim3(static_cast<unsigned>(m), static_cast<unsigned>(n_parts)), split_threads, 0, stream>>>(
      logits, vocab, chunk, ids, parts, tickets);
}

size_t sampler_workspace_bytes(int64_t m, int vocab) {
  const size_t n = static_cast<size_t>(m) * vocab;
  return 2 * align_up(n * 8) + 2 * align_up(n * 4) + align_up((m + 1) * 4) + align_up(m * 4) +
         align_up(n) + cub_temp_bytes(m, vocab);
}

void sample_rows(const float* logits, int64_t m, int vocab, const dev_sampling* params, void* ws_base,
                 int32_t* ids, cudaStream_t stream) {
  if (m == 0) return;
  argmax_rows(logits, m, vocab, ids, stream);
  sampler_ws ws = carve(ws_base, m, vocab);
  const auto rows = static_cast<unsigned>(m);
  weights_kernel<<<rows, threads, 0, stream>>>(logits, vocab, params, ws);
  cub::DeviceSegmentedRadixSort::SortPairsDescending(ws.temp, ws.temp_bytes, ws.w, ws.w_sorted, ws.ids,
                                                     ws.ids_sorted, m * vocab, static_cast<int>(m),
                                                     ws.offsets, ws.offsets + 1, 0, 64, stream);
  select_kernel<<<rows, threads, 0, stream>>>(vocab, params, ws, ids);
}

}  // namespace tandem::cuda
