#pragma once
// One row of the (add-)RMS norm, shared by rms_norm_kernel (pointwise.cu: one block of
// norm_threads(d) threads per row) and the q8 linears' add_rms_norm epilogue (the grid's
// last block, of 128 or 256 threads, normalises every row), so that both give the same bits.
//
// The result depends on how the sum of squares is split and reduced: thread v of a
// norm_threads(d)-thread block sums elements v, v + T, v + 2T, ... (T = norm_threads(d)) in
// order with fused multiply-adds, each warp's 32 partials go through warp_sum's butterfly,
// and lane i of every warp takes warp i's sum into the same butterfly again (block_sum in
// common.cuh). rms_norm_row plays those T "virtual" threads with however many threads the
// calling block has: physical warp p plays virtual warps p, p + P, ... (P physical warps),
// its lane l virtual lane l, so every virtual thread's partial, every warp sum and the final
// sum are the same operations in the same order (q8_stage.cuh's rms prologue does the same).
// With blockDim.x == T (rms_norm_kernel) each warp plays exactly its own warp.
#include "common.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda::detail {

// The threads of rms_norm_kernel's block for rows of d values (at most 1024, the block
// limit; a multiple of 32).
__host__ __device__ constexpr int norm_threads(int64_t d) {
  return d >= 1024 ? 1024 : static_cast<int>((d + 31) / 32 * 32);
}

// How rms_norm_row reads x (the values added to the residual): plainly where an earlier
// kernel wrote them, through L2 where other blocks of the same grid did (their stores are
// not in this block's L1).
struct load_plain {
  __device__ __forceinline__ float operator()(const float* p) const { return *p; }
};
struct load_l2 {
  __device__ __forceinline__ float operator()(const float* p) const { return __ldcg(p); }
};

// r [d] += x (when x is set), kept = r (when kept is set), out = r / rms(r) * w, the sum of
// squares reduced as a block of `vthreads` = norm_threads(d) threads reduces it (see above).
// A warp takes U of its virtual warps at a time and requests all their values before it uses
// any (a block playing many virtual threads is otherwise one memory round trip per virtual
// warp); each element is still read, added, stored and squared by one thread, in its virtual
// thread's order. Every thread of the block calls it (it synchronises the block); blockDim.x is
// a multiple of 32. w0 is w[threadIdx.x] when threadIdx.x < d (the caller may read it before
// its wait), red 32 shared floats.
template <int U, class Load>
__device__ __forceinline__ void rms_norm_row(float* r, const float* x, float* kept, const float* w, float w0,
                                             float eps, int64_t d, float* out, int vthreads, float* red, Load load) {
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, warps = blockDim.x >> 5;
  const int vwarps = vthreads >> 5;
  const int64_t vstep = int64_t{warps} * 32;  // from virtual warp vw's element to vw + warps's
  __syncthreads();  // red's readers of an earlier row are done
  for (int vw0 = warp; vw0 < vwarps; vw0 += U * warps) {
    float ss[U];
#pragma unroll
    for (int u = 0; u < U; ++u) ss[u] = 0.0f;
    // Element k of virtual warp vw0 + u * warps is j0 + u * vstep with j0 = vw0 * 32 + lane +
    // k * vthreads; j grows with u, so j0 >= d ends every u.
    for (int64_t j0 = vw0 * 32 + lane; j0 < d; j0 += vthreads) {
      float v[U], xv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = j0 + u * vstep;
        const bool in = vw0 + u * warps < vwarps && j < d;
        v[u] = in ? r[j] : 0.0f;
        xv[u] = in && x ? load(x + j) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = j0 + u * vstep;
        if (vw0 + u * warps < vwarps && j < d) {
          if (x) {
            v[u] += xv[u];
            r[j] = v[u];
            if (kept) kept[j] = v[u];
          }
          ss[u] += v[u] * v[u];
        }
      }
    }
#pragma unroll
    for (int u = 0; u < U; ++u) {
      const int vw = vw0 + u * warps;
      if (vw < vwarps) {  // warp-uniform
        const float s = warp_sum(ss[u]);
        if (lane == 0) red[vw] = s;
      }
    }
  }
  __syncthreads();
  const float ss = warp_sum(lane < vwarps ? red[lane] : 0.0f);
  const float inv = 1.0f / sqrtf(ss / static_cast<float>(d) + eps);
  for (int vw0 = warp; vw0 < vwarps; vw0 += U * warps) {
    for (int64_t j0 = vw0 * 32 + lane; j0 < d; j0 += vthreads) {
      float v[U], wv[U];
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = j0 + u * vstep;
        const bool in = vw0 + u * warps < vwarps && j < d;
        v[u] = in ? r[j] : 0.0f;
        wv[u] = in ? (j == threadIdx.x ? w0 : w[j]) : 0.0f;
      }
#pragma unroll
      for (int u = 0; u < U; ++u) {
        const int64_t j = j0 + u * vstep;
        if (vw0 + u * warps < vwarps && j < d) out[j] = v[u] * inv * wv[u];
      }
    }
  }
}

// The add_rms_norm after a linear (the NORM kernels of gemv_q8.cu and gemv_q8_mma.cu): the
// grid's last block to finish takes every row's product from y [n, d] (written by all blocks),
// adds it to the residual and normalises the row with rms_norm_kernel's arithmetic, so the
// launch gives linear() then add_rms_norm() bit for bit. Which block is last: each block's
// threads fence their stores of y, then one thread takes a ticket (atomicAdd); the block
// drawing gridDim.x - 1 comes after every other block's ticket, hence its products, and sets
// the counter back to zero for the next launch (and the next replay of a recorded graph).
// Every thread of the block calls it, after its last store of y.
__device__ __forceinline__ void add_rms_norm_last_block(const dev_add_norm& nm, const float* y, int n, int64_t d) {
  __shared__ float red[32];
  __shared__ bool last;
  __threadfence();  // this thread's products are visible device-wide before the ticket is taken
  __syncthreads();
  if (threadIdx.x == 0) {
    last = atomicAdd(nm.ticket, 1u) == gridDim.x - 1;
    if (last) *nm.ticket = 0;  // every other block has taken its ticket
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  const float w0 = threadIdx.x < d ? nm.weight[threadIdx.x] : 0.0f;
  for (int t = 0; t < n; ++t) {
    const int64_t o = t * d;
    rms_norm_row<8>(nm.residual + o, y + o, nm.kept ? nm.kept + o : nullptr, nm.weight, w0, nm.eps, d, nm.out + o,
                    norm_threads(d), red, load_l2{});
  }
}

}  // namespace tandem::cuda::detail
