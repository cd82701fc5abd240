#pragma once
// The index arithmetic of moe_forward's tensor-core GEMMs, in plain constexpr C++ so that the
// plan kernel (moe_route.cu), the GEMM kernels (moe_grouped_mma.cu) and a CPU emulation
// (tests/cpu/test_moe_tiles.cpp) share one copy of it (nvcc: --expt-relaxed-constexpr).
//
// Row tiles: the plan cuts each expert's slots into tiles of at most `cap` rows, expert-major.
// cap is 256 with the wide kernel (one tile per expert up to 256 rows: at 4,096 tokens x
// top-8 over 256 experts an expert has Binomial(32768, 1/256) ~ 128 +- 11 rows, so a cap of
// 128 gave half the experts a second, nearly empty tile that streamed all the expert's
// weights again) and 128 with the 128 x 128 kernel (under 32 rows an expert on average, and
// on devices without the shared memory for 3 stages of the wide one: GB10).
//
// CTA shapes of the wide kernel (8 warps of 64 x 64, the same 384 staged rows per k stage):
//  - tall: rows in (128, 256]: 256 rows x 128 columns, warps 4 (rows) x 2 (columns);
//  - wide: rows <= 128: 128 rows x 256 columns, warps 2 x 4.
// The grid's x counts 128-column blocks; a wide CTA takes block pair x (columns 256 x ..),
// so x >= wide_col_blocks(N) has nothing to do and exits.
#include <cstdint>

namespace tandem::cuda::moe_detail {

inline constexpr int tile_rows = 128;   // the fallback kernel's BM: its plan's row cap
inline constexpr int wide_cap = 256;    // the wide kernel's plan's row cap
inline constexpr int col_block = 128;   // grid x unit: 128 columns
inline constexpr int warp_tile = 64;    // wide kernel: each warp 64 rows x 64 columns
inline constexpr int staged_rows = 384; // wide kernel: A + B rows of one k stage, either shape

constexpr int ceil_div(int64_t a, int64_t b) { return static_cast<int>((a + b - 1) / b); }

// Tiles of an expert with `count` rows, and tile j's rows (the last holds the remainder).
constexpr int tiles_of(int count, int cap) { return ceil_div(count, cap); }
constexpr int rows_of_tile(int count, int cap, int j) { return count - j * cap < cap ? count - j * cap : cap; }

// Upper bound of the plan's tile count over P pairs and E experts, for any cap >= `cap`:
// sum over experts of ceil(c / cap) <= P / cap + (experts with pairs).
constexpr int64_t max_tiles_for(int64_t E, int64_t P, int cap) { return P / cap + (E < P ? E : P) + 1; }

struct cta_shape {
  int bm;       // A rows staged (rows past the tile's are zero-filled)
  int bn;       // columns (B rows) staged
  int warps_m;  // warps along rows; 8 / warps_m along columns
};
constexpr cta_shape shape_for(int rows) { return rows > 128 ? cta_shape{256, 128, 4} : cta_shape{128, 256, 2}; }

// 128-column blocks of the grid, and those a wide CTA uses (it covers two).
constexpr int col_blocks(int64_t N) { return ceil_div(N, col_block); }
constexpr int wide_col_blocks(int64_t N) { return ceil_div(N, 2 * col_block); }

// First column of CTA x for a tile of `rows` rows, or -1 when that CTA has no columns.
constexpr int64_t cta_col0(int rows, int64_t N, int x) {
  const cta_shape s = shape_for(rows);
  const int64_t n0 = int64_t{x} * s.bn;
  return n0 < N ? n0 : -1;
}

// Warp w's first row and column inside the CTA tile.
constexpr int warp_m0(const cta_shape& s, int w) { return (w / (8 / s.warps_m)) * warp_tile; }
constexpr int warp_n0(const cta_shape& s, int w) { return (w % (8 / s.warps_m)) * warp_tile; }

// 16-row mma blocks (of 4) of a warp starting at row m0 that hold rows of a `rows`-row tile:
// the others are skipped (no math, no stores).
constexpr int mma_blocks(int rows, int m0) {
  const int b = (rows - m0 + 15) / 16;
  return b < 0 ? 0 : (b > warp_tile / 16 ? warp_tile / 16 : b);
}

// m16n8 accumulator q (0..3) of a lane: row lane / 4 (+ 8 for q >= 2), column 2 (lane % 4)
// (+ 1 for odd q), inside the fragment.
constexpr int frag_row(int lane, int q) { return (lane >> 2) + (q >= 2 ? 8 : 0); }
constexpr int frag_col(int lane, int q) { return 2 * (lane & 3) + (q & 1); }

}  // namespace tandem::cuda::moe_detail
