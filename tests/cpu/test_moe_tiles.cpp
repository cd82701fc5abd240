#define BOOST_TEST_MODULE moe_tiles
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "moe_tiles.hpp"

// moe_forward's tensor-core tiling (kernels/cuda/src/moe_tiles.hpp) emulated on the host with
// the functions the plan kernel and the wide GEMM kernel call: the plan's tiles partition
// every expert's slots; each CTA of the wide kernel stages only A rows of its own expert's
// slots and B rows below N (everything else zero-filled), and its epilogue writes every
// (slot, column) of y (down) and every (slot, ffn column) of h (gate+up, w13 interleaved by
// 8) exactly once, for expert sizes around the 128 / 256 boundaries, skewed and uniform
// routings and column counts that are not multiples of the tiles. The checker is also fed
// broken plans, which it must reject. backend.cuda's results are test_gpu_moe's.
using namespace tandem::cuda::moe_detail;

namespace {

struct tile {
  int expert, row0, rows;
};

// The plan kernel's tiles (moe_route.cu: plan_kernel), expert-major, slots by exclusive scan.
std::vector<tile> plan(const std::vector<int>& counts, int cap, std::vector<int>& offsets) {
  std::vector<tile> out;
  offsets.assign(counts.size() + 1, 0);
  for (size_t e = 0; e < counts.size(); ++e) {
    offsets[e + 1] = offsets[e] + counts[e];
    for (int j = 0; j < tiles_of(counts[e], cap); ++j)
      out.push_back({static_cast<int>(e), offsets[e] + j * cap, rows_of_tile(counts[e], cap, j)});
  }
  return out;
}

// Emulates the wide kernel's grid over `tiles` at N columns (gate+up when !down: N = 2 ffn);
// returns the problems found (empty: every output once, no read out of range).
std::vector<std::string> check(const std::vector<tile>& tiles, const std::vector<int>& counts,
                               const std::vector<int>& offsets, int cap, int64_t N, bool down) {
  std::vector<std::string> bad;
  auto fail = [&](const std::string& s) {
    if (bad.size() < 8) bad.push_back(s);
  };
  const int P = offsets.back();
  const int64_t E = static_cast<int64_t>(counts.size());
  if (static_cast<int64_t>(tiles.size()) > max_tiles_for(E, P, cap)) fail("more tiles than the grid's max_tiles");
  if (static_cast<int64_t>(tiles.size()) > max_tiles_for(E, P, tile_rows)) fail("more tiles than the workspace holds");
  const int64_t cols = down ? N : N / 2;  // y columns, or h (ffn) columns
  std::vector<uint8_t> written(static_cast<size_t>(P) * static_cast<size_t>(cols), 0);
  for (const tile& t : tiles) {
    if (t.rows < 1 || t.rows > cap) fail("tile rows " + std::to_string(t.rows));
    const int lo = offsets[t.expert], hi = offsets[t.expert + 1];
    const cta_shape s = shape_for(t.rows);
    if (s.bm + s.bn != staged_rows || t.rows > s.bm) fail("shape");
    for (int x = 0; x < col_blocks(N); ++x) {
      const int64_t n0 = cta_col0(t.rows, N, x);
      if (n0 < 0) continue;
      // Loads: thread tid, chunk i stages row tid / 8 + 32 i (12 chunks).
      for (int tid = 0; tid < 256; ++tid)
        for (int i = 0; i < staged_rows * 8 / 256; ++i) {
          const int r = tid / 8 + 32 * i;
          if (r >= staged_rows) fail("staged row past the stage");
          if (r < s.bm) {
            if (r < t.rows && (t.row0 + r < lo || t.row0 + r >= hi)) fail("A row outside the expert's slots");
          } else {
            const int64_t n = n0 + (r - s.bm);
            if (n < 0) fail("B row < 0");  // n >= N is zero-filled
          }
        }
      // Epilogue.
      for (int w = 0; w < 8; ++w) {
        const int m0 = warp_m0(s, w), wn0 = warp_n0(s, w);
        if (m0 + warp_tile > s.bm || wn0 + warp_tile > s.bn) fail("warp outside the CTA tile");
        for (int lane = 0; lane < 32; ++lane)
          for (int mi = 0; mi < mma_blocks(t.rows, m0); ++mi)
            for (int half = 0; half < 2; ++half) {
              const int r = m0 + 16 * mi + frag_row(lane, 2 * half);
              if (r >= t.rows) continue;
              const int slot = t.row0 + r;
              if (slot < lo || slot >= hi) {
                fail("slot outside the expert");
                continue;
              }
              auto mark = [&](int64_t c) {
                if (c < 0 || c >= cols) return fail("column " + std::to_string(c) + " out of range");
                ++written[static_cast<size_t>(slot) * static_cast<size_t>(cols) + static_cast<size_t>(c)];
              };
              if (down) {
                for (int ni = 0; ni < warp_tile / 8; ++ni) {
                  const int64_t c = n0 + wn0 + 8 * ni + frag_col(lane, 0);
                  if (c < N) mark(c), mark(n0 + wn0 + 8 * ni + frag_col(lane, 1));
                }
              } else {
                for (int nj = 0; nj < warp_tile / 16; ++nj) {
                  const int64_t g16 = n0 + wn0 + 16 * nj;
                  if (g16 < N) mark(g16 / 2 + frag_col(lane, 0)), mark(g16 / 2 + frag_col(lane, 1));
                }
              }
            }
      }
    }
  }
  for (int slot = 0; slot < P; ++slot)
    for (int64_t c = 0; c < cols; ++c) {
      const int n = written[static_cast<size_t>(slot) * static_cast<size_t>(cols) + static_cast<size_t>(c)];
      if (n != 1) fail("slot " + std::to_string(slot) + " column " + std::to_string(c) + " written " + std::to_string(n) + " times");
    }
  return bad;
}

void check_all(const std::vector<int>& counts, const std::vector<int64_t>& ns) {
  for (int cap : {tile_rows, wide_cap}) {
    std::vector<int> offsets;
    const std::vector<tile> tiles = plan(counts, cap, offsets);
    for (int64_t N : ns)
      for (bool down : {false, true}) {
        BOOST_TEST_CONTEXT("cap " << cap << " N " << N << (down ? " down" : " gate+up")) {
          const auto bad = check(tiles, counts, offsets, cap, N, down);
          BOOST_TEST(bad.empty(), (bad.empty() ? std::string() : bad.front()));
        }
      }
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(shapes_split_at_128_rows) {
  BOOST_TEST(shape_for(1).bm == 128);
  BOOST_TEST(shape_for(128).bm == 128);
  BOOST_TEST(shape_for(129).bm == 256);
  BOOST_TEST(shape_for(256).bm == 256);
  BOOST_TEST(tiles_of(256, wide_cap) == 1);
  BOOST_TEST(tiles_of(257, wide_cap) == 2);
  BOOST_TEST(rows_of_tile(257, wide_cap, 1) == 1);
  BOOST_TEST(cta_col0(100, 4096, 15) == 15 * 256);
  BOOST_TEST(cta_col0(100, 4096, 16) == -1);  // a wide CTA past the columns exits
  BOOST_TEST(cta_col0(200, 4096, 31) == 31 * 128);
}

BOOST_AUTO_TEST_CASE(every_output_once_at_the_boundaries) {
  // Expert sizes around 16, 128 and 256 rows, an empty expert, and > 512.
  const std::vector<int> counts{0, 1, 15, 16, 17, 64, 127, 128, 129, 140, 192, 255, 256, 257, 300, 383, 384, 385, 513, 0, 3};
  check_all(counts, {16, 64, 192, 320, 2048});
}

BOOST_AUTO_TEST_CASE(every_output_once_with_routed_counts) {
  std::mt19937 rng(17);
  // Uniform top-8 over 256 experts at 4,096 tokens (the bench's ~128 +- 11 rows an expert),
  // at a narrow N to keep the coverage map small.
  std::vector<int> counts(256, 0);
  for (int p = 0; p < 4096 * 8; ++p) ++counts[rng() % 256];
  check_all(counts, {48, 272});
  // Skewed: a few experts take most pairs (test_gpu_moe's routings), at GLM-5's widths.
  std::vector<int> skew{700, 260, 131, 5, 0, 90, 1, 44};
  check_all(skew, {4096, 6144});
}

BOOST_AUTO_TEST_CASE(the_checker_rejects_broken_plans) {
  const std::vector<int> counts{140, 40, 260};
  std::vector<int> offsets;
  std::vector<tile> tiles = plan(counts, wide_cap, offsets);
  BOOST_TEST(check(tiles, counts, offsets, wide_cap, 192, true).empty());
  std::vector<tile> longer = tiles;
  longer[1].rows += 1;  // reads and writes the next expert's first slot
  BOOST_TEST(!check(longer, counts, offsets, wide_cap, 192, true).empty());
  std::vector<tile> dropped = tiles;
  dropped.pop_back();  // a slot nobody writes
  BOOST_TEST(!check(dropped, counts, offsets, wide_cap, 192, false).empty());
  std::vector<tile> twice = tiles;
  twice.push_back(tiles[0]);  // written twice
  BOOST_TEST(!check(twice, counts, offsets, wide_cap, 192, false).empty());
  std::vector<int> offsets128;
  const std::vector<tile> by128 = plan(counts, tile_rows, offsets128);
  BOOST_TEST(!check(by128, counts, offsets128, 64, 192, true).empty());  // tiles over the cap
}
