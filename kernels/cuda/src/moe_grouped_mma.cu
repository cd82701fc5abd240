// The tensor-core grouped GEMMs of moe_forward's mma path (moe_grouped.cuh): the choice
// between the wide kernel (moe_grouped_wide.cu: row tiles up to 256, 64 x 64 warp tiles, one
// CTA per SM, 3-4 stages of 54 KB) from 32 rows an expert on average where the device's
// opt-in shared memory holds 3 of its stages (H100/H200: 227 KB), and the 128 x 128 kernel
// below otherwise (fewer rows; GB10: 99 KB), which the plan then feeds 128-row tiles.
//
// The 128 x 128 kernel: one CTA = one (row tile, column tile): a row tile is up to 128 of
// one expert's slots (the plan's tiles, expert-major), a column tile 128 rows of w13[e]
// (gate+up) or w2[e] (down).
// 8 warps as 2 (rows) x 4 (columns), a 64 x 32 warp tile = 4 x 4 m16n8k16 f16 mma with f32
// accumulators. K advances in stages of 64 through a 3-stage cp.async ring (2 where the
// device's opt-in shared memory is smaller than 3 x 36 KB, e.g. GB10): A rows (gathered by
// slot_tok for gate+up, so no gathered copy of x is written) and B rows, 144-byte padded rows
// (ldmatrix conflict-free). Rows past the tile's count are zero-filled and their 16-row mma
// blocks skipped (a warp whose 64 rows are all empty only loads), so a partial tile costs its
// weight stream, not its empty rows' math.
//  - gate+up epilogue: w13's rows are gate/up interleaved by 8, so n8 fragments 2i and 2i+1
//    of a warp hold gate and up of the same 8 columns in the same registers: h = silu(g) * u
//    in f32, stored f16 to h16[slot][ffn].
//  - down epilogue: f32 rows y[pair][hidden] (the pair's slot order is restored here; the
//    combine kernel weights and sums them per token).
// Grid: x = column tile (fastest, so the column tiles of one row tile run side by side and
// share its A rows in L2; the row tiles of one expert are adjacent, so its weights come from
// DRAM about once), y = row tile up to the worst case (max_tiles); CTAs past the plan's tile
// count exit at once.
#include "moe_mma_ops.cuh"

namespace tandem::cuda::moe_detail {
namespace {

constexpr int BM = tile_rows;  // 128
constexpr int BN = 128;
constexpr int BK = 64;
constexpr int LDS = BK + 8;  // halves per staged row: 144 bytes
constexpr int threads = 256;
constexpr int WM = 64, WN = 32;         // warp tile
constexpr int MI = WM / 16, NI = WN / 8;  // 4 x 4 mma per k16
constexpr size_t stage_bytes = static_cast<size_t>(BM + BN) * LDS * 2;
static_assert(BM == 2 * WM && BN == 4 * WN && NI % 2 == 0);

template <bool DOWN, int STAGES>
__global__ void __launch_bounds__(threads, 2) grouped_gemm_kernel(gemm_args a) {
  extern __shared__ __align__(16) uint8_t smem[];
  const int tile = blockIdx.y;
  if (tile >= a.ws.hdr[1]) return;
  const int4 t = a.ws.tiles[tile];
  const int e = t.x, row0 = t.y, rows = t.z;
  const int64_t N = a.N, K = a.K;
  const int64_t n0 = int64_t{blockIdx.x} * BN;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int warp_m0 = (warp >> 2) * WM, warp_n0 = (warp & 3) * WN;

  const uint32_t s_base = static_cast<uint32_t>(__cvta_generic_to_shared(smem));
  const uint32_t sA = s_base, sB = s_base + STAGES * BM * LDS * 2;

  // This thread's 4 A rows and 4 B rows (row tid / 8 + 32 i, 16-byte chunk tid % 8 of a stage).
  const int kc = (tid & 7) * 8;
  const __half* a_src[4];
  const __half* b_src[4];
  bool a_ok[4], b_ok[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int r = (tid >> 3) + 32 * i;
    a_ok[i] = r < rows;
    int64_t arow = 0;
    if (a_ok[i]) arow = DOWN ? row0 + r : a.ws.slot_tok[row0 + r];
    a_src[i] = a.A + arow * K;
    const int64_t n = n0 + r;
    b_ok[i] = n < N;
    b_src[i] = a.W + (int64_t{e} * N + (b_ok[i] ? n : 0)) * K;
  }
  const int KT = static_cast<int>((K + BK - 1) / BK);
  auto load_stage = [&](int stage, int kt) {
    const int64_t k = int64_t{kt} * BK + kc;
    const bool k_ok = k < K;
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const int r = (tid >> 3) + 32 * i;
      const uint32_t off = static_cast<uint32_t>(((stage * BM + r) * LDS + kc) * 2);
      const bool ao = a_ok[i] && k_ok, bo = b_ok[i] && k_ok;
      cp_async_zfill(sA + off, ao ? a_src[i] + k : a.A, ao ? 16 : 0);
      cp_async_zfill(sB + off, bo ? b_src[i] + k : a.W, bo ? 16 : 0);
    }
  };

  float acc[MI][NI][4];
#pragma unroll
  for (int mi = 0; mi < MI; ++mi)
#pragma unroll
    for (int ni = 0; ni < NI; ++ni)
#pragma unroll
      for (int q = 0; q < 4; ++q) acc[mi][ni][q] = 0.0f;
  // 16-row blocks of this warp that hold rows of the tile.
  const int mcount = max(0, min(MI, (rows - warp_m0 + 15) / 16));

#pragma unroll
  for (int s = 0; s < STAGES - 1; ++s) {
    if (s < KT) load_stage(s, s);
    cp_commit();
  }
  // ldmatrix lane offsets: A rows lane % 16, k (lane / 16) * 8; B rows (lane % 8) + (lane / 16) * 8,
  // k ((lane / 8) % 2) * 8.
  const uint32_t a_lane = static_cast<uint32_t>(((warp_m0 + (lane & 15)) * LDS + (lane >> 4) * 8) * 2);
  const uint32_t b_lane = static_cast<uint32_t>(((warp_n0 + (lane & 7) + (lane >> 4) * 8) * LDS + ((lane >> 3) & 1) * 8) * 2);
  for (int kt = 0; kt < KT; ++kt) {
    cp_wait<STAGES - 2>();
    __syncthreads();  // stage kt landed for all threads; stage kt - 1 is free for the prefetch
    const int pf = kt + STAGES - 1;
    if (pf < KT) load_stage(pf % STAGES, pf);
    cp_commit();
    const int st = kt % STAGES;
    const uint32_t a_st = sA + static_cast<uint32_t>(st * BM * LDS * 2) + a_lane;
    const uint32_t b_st = sB + static_cast<uint32_t>(st * BN * LDS * 2) + b_lane;
    if (mcount > 0) {
#pragma unroll
      for (int ks = 0; ks < BK / 16; ++ks) {
        uint32_t bf[NI][2];
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
          uint32_t r[4];
          ldmatrix_x4(r, b_st + static_cast<uint32_t>((nj * 16 * LDS + ks * 16) * 2));
          bf[2 * nj][0] = r[0], bf[2 * nj][1] = r[1], bf[2 * nj + 1][0] = r[2], bf[2 * nj + 1][1] = r[3];
        }
#pragma unroll
        for (int mi = 0; mi < MI; ++mi) {
          if (mi < mcount) {
            uint32_t af[4];
            ldmatrix_x4(af, a_st + static_cast<uint32_t>((mi * 16 * LDS + ks * 16) * 2));
#pragma unroll
            for (int ni = 0; ni < NI; ++ni) mma16816(acc[mi][ni], af, bf[ni]);
          }
        }
      }
    }
  }
  cp_wait<0>();

  // Epilogue. Accumulator q of fragment (mi, ni): row warp_m0 + 16 mi + lane / 4 (+ 8 for q >= 2),
  // column warp_n0 + 8 ni + 2 (lane % 4) (+ 1 for odd q).
  const int col2 = 2 * (lane & 3);
#pragma unroll
  for (int mi = 0; mi < MI; ++mi) {
    if (mi >= mcount) continue;
#pragma unroll
    for (int half = 0; half < 2; ++half) {
      const int r = warp_m0 + 16 * mi + (lane >> 2) + 8 * half;
      if (r >= rows) continue;
      const int slot = row0 + r;
      if constexpr (DOWN) {
        float* y = a.ws.y + int64_t{a.ws.slot_pair[slot]} * N;
#pragma unroll
        for (int ni = 0; ni < NI; ++ni) {
          const int64_t c = n0 + warp_n0 + 8 * ni + col2;
          if (c < N) *reinterpret_cast<float2*>(y + c) = make_float2(acc[mi][ni][2 * half], acc[mi][ni][2 * half + 1]);
        }
      } else {
        const int64_t F = N / 2;
        __half* h = static_cast<__half*>(a.ws.h) + int64_t{slot} * F;
#pragma unroll
        for (int nj = 0; nj < NI / 2; ++nj) {
          const int64_t g16 = n0 + warp_n0 + 16 * nj;  // a 16-row group of w13: 8 gate, then 8 up rows
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

struct kconf {
  int stages = 0;      // the 128 x 128 kernel's
  size_t smem = 0;
  int wide_stages = 0;  // 0: the wide kernel does not fit
};

// The stage counts this device's shared memory allows, with the kernels' opt-in set: the
// 128 x 128 kernel 3, else 2; the wide kernel 4, else 3, else none.
kconf config() {
  static kconf cache[64];
  int dev = 0;
  cudaGetDevice(&dev);
  kconf& c = cache[dev & 63];
  if (c.stages == 0) {
    int optin = 0;
    cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
    const auto o = static_cast<size_t>(optin);
    kconf n;
    n.stages = o >= 3 * stage_bytes ? 3 : 2;
    n.smem = n.stages * stage_bytes;
    if (n.stages == 3) {
      cudaFuncSetAttribute(grouped_gemm_kernel<false, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(n.smem));
      cudaFuncSetAttribute(grouped_gemm_kernel<true, 3>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(n.smem));
    } else {
      cudaFuncSetAttribute(grouped_gemm_kernel<false, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(n.smem));
      cudaFuncSetAttribute(grouped_gemm_kernel<true, 2>, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(n.smem));
    }
    n.wide_stages = o >= 4 * wide_stage_bytes ? 4 : o >= 3 * wide_stage_bytes ? 3 : 0;
    if (n.wide_stages > 0) wide_prepare(n.wide_stages);
    c = n;
  }
  return c;
}

// The wide kernel from a mean of 32 rows an expert (P >= 32 E: 1,024 tokens at GLM-5's 256
// experts x top-8). Below, both kernels stream each hit expert's weights about once (a
// second 128-row tile is rare) and are bound by that stream, where the 128 x 128 kernel's
// 2 CTAs per SM overlap one CTA's pipeline fill and epilogue with the other's stream (the
// wide one runs 1 CTA per SM); so 16..512 tokens keep the measured 128 x 128 path. Above,
// the math dominates and the wide kernel's single weight pass and 64 x 64 warp tiles win.
// A function of (E, P) only: the plan's cap and the launch agree without a host read.
constexpr int64_t wide_min_rows = 32;
bool use_wide(int64_t E, int64_t P) { return P >= wide_min_rows * E && config().wide_stages > 0; }

template <bool DOWN>
void launch(const gemm_args& a, int64_t E, int64_t P, cudaStream_t stream) {
  const kconf c = config();
  if (use_wide(E, P)) {
    const dim3 grid(static_cast<unsigned>(col_blocks(a.N)), static_cast<unsigned>(max_tiles_for(E, P, wide_cap)));
    wide_launch(DOWN, c.wide_stages, a, grid, stream);
    return;
  }
  const dim3 grid(static_cast<unsigned>((a.N + BN - 1) / BN), static_cast<unsigned>(max_tiles(E, P)));
  if (c.stages == 3) grouped_gemm_kernel<DOWN, 3><<<grid, threads, c.smem, stream>>>(a);
  else grouped_gemm_kernel<DOWN, 2><<<grid, threads, c.smem, stream>>>(a);
}

}  // namespace

int moe_mma_row_cap(int64_t E, int64_t P) { return use_wide(E, P) ? wide_cap : tile_rows; }

void moe_mma_gate_up(const dev_experts& w, int64_t P, const moe_ws& ws, cudaStream_t stream) {
  launch<false>({ws.x16, w.w13, 2 * w.ffn, w.hidden, ws}, w.n_experts, P, stream);
}

void moe_mma_down(const dev_experts& w, int64_t P, const moe_ws& ws, cudaStream_t stream) {
  launch<true>({static_cast<const __half*>(ws.h), w.w2, w.hidden, w.ffn, ws}, w.n_experts, P, stream);
}

}  // namespace tandem::cuda::moe_detail
