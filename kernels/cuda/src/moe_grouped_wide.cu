// The wide tensor-core grouped GEMM of moe_forward's mma path (moe_tiles.hpp for the
// shapes): one CTA covers ALL of a row tile's rows (up to 256: the plan's cap) for its
// column block, so an expert with up to 256 rows streams each weight tile from DRAM once.
//
// Why: at 4,096 tokens x top-8 over 256 experts each expert has ~128 +- 11 rows. With
// 128-row tiles about half the experts got a second tile of a few rows that cost a whole CTA
// streaming the expert's weight tile again (19.3 GB of f16 experts: reading them once takes
// ~4.6 ms at 4.2 TB/s), and the 64 x 32 warp tiles of the 128 x 128 kernel read 3 KB of
// shared memory per 16 mma (more than the SM's 128 B/clk feeds at one mma per clock).
//
// 8 warps, each 64 x 64 (4 x 8 m16n8k16 f16 mma, 128 f32 accumulators): per k16 a warp
// ldmatrixes 4 KB for 32 mma. The CTA is
//  - tall (rows > 128): 256 rows x 128 columns, warps 4 x 2;
//  - wide (rows <= 128): 128 rows x 256 columns, warps 2 x 4 (so a 1-tile expert of ~120
//    rows keeps all 8 warps busy, and its weights are read by half as many CTAs).
// Either way a k stage (64 wide) stages 384 rows, A first (gathered by slot_tok for gate+up),
// then B; 144-byte padded rows (ldmatrix conflict-free) in a 4-stage cp.async ring (3 where
// 4 x 54 KB does not fit). Rows past the tile's are zero-filled and their 16-row mma blocks
// skipped (a warp whose rows are all empty only loads). One CTA per SM (128 accumulators a
// thread); the B stream of the other CTAs and the deep ring hide the latency.
// Epilogues as the 128 x 128 kernel (moe_grouped_mma.cu): gate+up h = silu(g) * u (w13 rows
// interleaved by 8: n8 fragments 2i and 2i+1 of a warp are gate and up of the same columns),
// f16 into h16[slot][ffn]; down: f32 rows y[slot_pair[slot]][hidden]. No atomics: every
// output element is written by one thread of one CTA.
// Grid: x = 128-column block (fastest: a tile's CTAs run side by side, sharing its A rows in
// L2), y = row tile; wide tiles use the first ceil(N / 256) blocks, the rest exit at once.
#include "moe_mma_ops.cuh"

namespace tandem::cuda::moe_detail {
namespace {

constexpr int threads = 256;
constexpr int BK = 64;
constexpr int LDS = BK + 8;                              // halves per staged row: 144 bytes
constexpr int MI = warp_tile / 16, NI = warp_tile / 8;  // 4 x 8 mma per k16
constexpr int chunks = staged_rows * (BK / 8) / threads;  // 16-byte copies per thread per stage: 12
static_assert(wide_stage_bytes == static_cast<size_t>(staged_rows) * LDS * 2);
static_assert(shape_for(256).bm + shape_for(256).bn == staged_rows && shape_for(1).bm + shape_for(1).bn == staged_rows);
static_assert(NI % 2 == 0 && chunks * threads == staged_rows * (BK / 8));

template <bool DOWN, int STAGES>
__global__ void __launch_bounds__(threads, 1) wide_gemm_kernel(gemm_args a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int tile = blockIdx.y;
  if (tile >= a.ws.hdr[1]) return;
  const int4 t = a.ws.tiles[tile];
  const int e = t.x, row0 = t.y, rows = t.z;
  const int64_t N = a.N, K = a.K;
  const int64_t n0 = cta_col0(rows, N, static_cast<int>(blockIdx.x));
  if (n0 < 0) return;
  const cta_shape s = shape_for(rows);
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int wm0 = warp_m0(s, warp), wn0 = warp_n0(s, warp);
  const uint32_t s_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));

  // This thread's staged rows tid / 8 + 32 i, 16-byte chunk tid % 8: rows below bm are A
  // (the same for every thread: bm is a multiple of 32), the rest B. nullptr: zero fill.
  const int kc = (tid & 7) * 8;
  const __half* src[chunks];
#pragma unroll
  for (int i = 0; i < chunks; ++i) {
    const int r = (tid >> 3) + 32 * i;
    if (r < s.bm) {
      src[i] = nullptr;
      if (r < rows) src[i] = a.A + (DOWN ? int64_t{row0 + r} : int64_t{a.ws.slot_tok[row0 + r]}) * K;
    } else {
      const int64_t n = n0 + (r - s.bm);
      src[i] = n < N ? a.W + (int64_t{e} * N + n) * K : nullptr;
    }
  }
  const int KT = static_cast<int>((K + BK - 1) / BK);
  auto load_stage = [&](int stage, int kt) {
    const int64_t k = int64_t{kt} * BK + kc;
    const bool k_ok = k < K;
    const uint32_t st = s_base + static_cast<uint32_t>(stage * wide_stage_bytes);
#pragma unroll
    for (int i = 0; i < chunks; ++i) {
      const int r = (tid >> 3) + 32 * i;
      const bool ok = src[i] != nullptr && k_ok;
      cp_async_zfill(st + static_cast<uint32_t>((r * LDS + kc) * 2), ok ? src[i] + k : a.W, ok ? 16 : 0);
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
  const int mcount = mma_blocks(rows, wm0);

#pragma unroll
  for (int st = 0; st < STAGES - 1; ++st) {
    if (st < KT) load_stage(st, st);
    cp_commit();
  }
  // ldmatrix lane offsets: A rows lane % 16, k (lane / 16) * 8; B rows (lane % 8) + (lane / 16) * 8,
  // k ((lane / 8) % 2) * 8 (matrices: n 0-7 k 0-7, n 0-7 k 8-15, n 8-15 k 0-7, n 8-15 k 8-15).
  const uint32_t a_lane = static_cast<uint32_t>(((wm0 + (lane & 15)) * LDS + (lane >> 4) * 8) * 2);
  const uint32_t b_lane =
      static_cast<uint32_t>(((s.bm + wn0 + (lane & 7) + (lane >> 4) * 8) * LDS + ((lane >> 3) & 1) * 8) * 2);
  for (int kt = 0; kt < KT; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for all threads; stage kt - 1 is free for the prefetch
    const int pf = kt + STAGES - 1;
    if (pf < KT) load_stage(pf % STAGES, pf);
    cp_commit();
    const uint32_t st = s_base + static_cast<uint32_t>((kt % STAGES) * wide_stage_bytes);
    if (mcount > 0) {
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) {
        uint32_t bf[NI][2];
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
          uint32_t r[4];
          ldmatrix_x4(r, st + b_lane + static_cast<uint32_t>((nj * 16 * LDS + ks * 16) * 2));
          bf[2 * nj][0] = r[0], bf[2 * nj][1] = r[1], bf[2 * nj + 1][0] = r[2], bf[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          if (mi < mcount) {
            uint32_t af[4];
            ldmatrix_x4(af, st + a_lane + static_cast<uint32_t>((mi * 16 * LDS + ks * 16) * 2));
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) mma16816(acc[mi][ni], af, bf[ni]);
          }
        }
      }
    }
  }
  cp_wait<0>();

  // Epilogue: accumulator q of fragment (mi, ni) is row wm0 + 16 mi + frag_row(lane, q),
  // column n0 + wn0 + 8 ni + frag_col(lane, q).
  const int col2 = frag_col(lane, 0);
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    if (mi >= mcount) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = wm0 + 16 * mi + frag_row(lane, 2 * half);
      if (r >= rows) continue;
      const int slot = row0 + r;
      if constexpr (DOWN) {
        float* y = a.ws.y + int64_t{a.ws.slot_pair[slot]} * N;
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const int64_t c = n0 + wn0 + 8 * ni + col2;
          if (c < N) *reinterpret_cast<float2*>(y + c) = make_float2(acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]);
        }
      } else {
        const int64_t F = N / 2;
        __half* h = static_cast<__half*>(a.ws.h) + int64_t{slot} * F;
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
          const int64_t g16 = n0 + wn0 + 16 * nj;  // a 16-row group of w13: 8 gate, then 8 up rows
          if (g16 >= N) continue;
          const float g0 = acc[mi][2 * nj][2 * half], g1 = acc[mi][2 * nj][2 * half + 1];
          const float u0 = acc[mi][2 * nj + 1][2 * half], u1 = acc[mi][2 * nj + 1][2 * half + 1];
          const float h0 = g0 / (1.0f + expf(-g0)) * u0, h1 = g1 / (1.0f + expf(-g1)) * u1;
          *reinterpret_cast<__half2*>(h + g16 / 2 + col2) = __floats2half2_rn(h0, h1);
        }
      }
    }
  }
}

template <int STAGES>
void set_smem() {
  constexpr int bytes = static_cast<int>(STAGES * wide_stage_bytes);
  cudaFuncSetAttribute(wide_gemm_kernel<false, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
  cudaFuncSetAttribute(wide_gemm_kernel<true, STAGES>, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes);
}

template <int STAGES>
void launch(bool down, const gemm_args& a, dim3 grid, cudaStream_t stream) {
  const size_t smem = STAGES * wide_stage_bytes;
  if (down) wide_gemm_kernel<true, STAGES><<<grid, threads, smem, stream>>>(a);
  else wide_gemm_kernel<false, STAGES><<<grid, threads, smem, stream>>>(a);
}

}  // namespace

void wide_prepare(int stages) {
  if (stages == 4) set_smem<4>();
  else set_smem<3>();
}

void wide_launch(bool down, int stages, const gemm_args& a, dim3 grid, cudaStream_t stream) {
  if (stages == 4) launch<4>(down, a, grid, stream);
  else launch<3>(down, a, grid, stream);
}

}  // namespace tandem::cuda::moe_detail
