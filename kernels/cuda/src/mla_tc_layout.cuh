#pragma once
// Geometry of mla_decode_tc.cu (MLA decode on tensor cores): its shared memory, the mma
// fragments' homes and the lanes' ldmatrix addresses, as plain index functions usable on the
// host too: tests/cpu/test_mla_tc_layout.cpp emulates the f16-staging kernels' data
// movement with them against a naive formulation. Everything here is a byte offset or an
// index; no memory is touched.
//
// Shapes: a block owns one query row, one group of 64 heads and one split of the row's keys;
// the latent row is rank 512 + rope 64 = 576 f32 (2304 bytes); keys go in tiles of 32.
//
// The f32-staging kernel (mla_decode_tc_kernel, TANDEM_CUDA_MLA_TC_STAGE=f32); the f16
// staging's geometry is namespace s16 below, which shares the head / k-step split, the Q
// fragments and the partial scores' unit numbering (sp_hole) with it.
// A stage holds one tile of 32 cache rows as f32, row-major (2304 bytes a row), each row's
// 16-byte chunks XOR-swizzled inside their 128-byte group: logical chunk c of row r sits at
// chunk (c & ~7) | ((c ^ r) & 7). After the tile lands, every 8 floats (f32 chunks 2k and
// 2k+1) are rounded to one 16-byte f16 chunk k written over f32 chunk 2k, by the thread
// that read both (no barrier between read and write). Thus the f16 tile lives in the
// stage's "even" chunks (row stride 2304 bytes; the swizzle makes every ldmatrix phase -
// 8 rows, one chunk each - hit 8 distinct 16-byte bank groups), and the "odd" chunks, 16
// bytes each, 2304 of them (36,864 bytes), are free: the tile's partial scores (32 KB) and
// probabilities (4 KB) go there ("holes").
#include <algorithm>
#include <climits>
#include <cstdint>

#ifdef __CUDACC__
#define MLA_TC_HD __host__ __device__ __forceinline__
#else
#define MLA_TC_HD inline
#endif

namespace tandem::cuda::mla_tc {

constexpr int heads = 64;                   // query heads per block (one head group)
constexpr int rank = 512, rope = 64;        // the only latent shape this kernel takes
constexpr int dim = rank + rope;            // 576 floats per cache row
constexpr int keys = 32;                    // keys per tile
constexpr int warps = 8, threads = warps * 32;
constexpr int ksteps = dim / 16;            // 36 k-steps of 16 dims in S = Q K^T
constexpr int kparts = 4;                   // S's k-steps are split over 4 warps (per 32 heads)
constexpr int ks_per_part = ksteps / kparts;  // 9
constexpr int row_bytes = dim * 4;          // 2304
constexpr int f32_chunks = dim / 4;         // 144 16-byte f32 chunks per row
constexpr int f16_chunks = dim / 8;         // 72 16-byte f16 chunks per row
constexpr int stage_bytes = keys * row_bytes;        // 73,728
constexpr int holes = keys * f16_chunks;             // 2304 16-byte holes per stage
constexpr int qfrag_bytes = 4 * ksteps * 32 * 16;    // 73,728: Q as f16 A fragments
constexpr int max_chunk = 2560;                      // keys per split (slot table in shared memory)
constexpr int copies_per_thread = keys * f32_chunks / threads;  // 18 cp.async of 16 bytes per tile
constexpr int converts_per_thread = holes / threads;           // 9 f16 chunks per tile
// Shared memory: two stages, Q fragments, the rows' softmax corrections, the slot table.
constexpr int off_qfrag = 2 * stage_bytes;
constexpr int off_alpha = off_qfrag + qfrag_bytes;
constexpr int off_slots = off_alpha + heads * 4;
constexpr int smem_bytes = off_slots + max_chunk * 4;  // 231,680 (H100 / H200: 232,448 per block)

static_assert(ksteps % kparts == 0 && keys * f32_chunks % threads == 0 && holes % threads == 0);
static_assert(rank / 64 == warps, "P V: each warp owns 64 of the latent dims");
static_assert(smem_bytes <= 232448, "fits one H100 / H200 block");

// Physical chunk of logical 16-byte chunk c of stage row r: (c & ~7) | ((c ^ r) & 7).
MLA_TC_HD int phys_chunk(int r, int c) { return c ^ (r & 7); }
// Byte offset (in a stage) of f32 chunk c (floats 4c .. 4c+3) of row r.
MLA_TC_HD int f32_off(int r, int c) { return r * row_bytes + 16 * phys_chunk(r, c); }
// Byte offset of f16 chunk k (dims 8k .. 8k+7) of row r: the place of f32 chunk 2k.
MLA_TC_HD int f16_off(int r, int k) { return f32_off(r, 2 * k); }

// Conversion task i (0 .. holes): row r, f16 chunk k. Consecutive tasks alternate between
// the rows of a pair (2 rp, 2 rp + 1) and walk k, so the 8 lanes of a 16-byte shared-memory
// phase touch 4 chunks of each of two rows of opposite parity: 8 distinct bank groups.
MLA_TC_HD void convert_task(int i, int& r, int& k) {
  const int rbit = i & 1, pair = i >> 1;
  k = pair % f16_chunks;
  r = 2 * (pair / f16_chunks) + rbit;
}
// Byte offset of hole u (0 .. holes): f32 chunk 2k+1 of the row and k of conversion task u
// (the same pairing keeps 8 consecutive holes on 8 distinct bank groups).
MLA_TC_HD int hole_off(int u) {
  int r = 0, k = 0;
  convert_task(u, r, k);
  return f32_off(r, 2 * k + 1);
}

// Partial scores of S = Q K^T: warp (mh, kq) (heads 32 mh .., k-steps 9 kq ..) leaves its
// accumulators per row group rg = 2 * (m tile within the 32 heads) + (upper 8 rows), as two
// float4 per lane (q: n tiles 2q, 2q+1 of the tile's 32 keys): holes 0 .. 2047.
MLA_TC_HD int sp_hole(int kq, int mh, int rg, int q, int lane) {
  return (((kq * 2 + mh) * 4 + rg) * 2 + q) * 32 + lane;
}
// Probabilities as f16 A fragments of O += P V: m tile mt (16 heads), k-step kp (16 keys),
// lane: holes 2048 .. 2303 (4 registers per lane).
MLA_TC_HD int pf_hole(int mt, int kp, int lane) { return 2048 + (mt * 2 + kp) * 32 + lane; }
// Q's A fragment of m tile mt, k-step ks for one lane (4 registers, 16 bytes).
MLA_TC_HD int qfrag_off(int mt, int ks, int lane) { return ((mt * ksteps + ks) * 32 + lane) * 16; }

// ldmatrix.x4 row addresses (lane gives the row of matrix lane >> 3).
// S = Q K^T, B fragments of keys 16 np .. 16 np + 15 at k-step ks (non-transposed: a matrix
// row is 8 dims of one key): matrices (keys +0, dims +0), (+0, +8), (+8, +0), (+8, +8) give
// b0, b1 of n tile 2 np and b0, b1 of n tile 2 np + 1.
MLA_TC_HD int qk_ldsm_off(int lane, int np, int ks) {
  const int mi = lane >> 3, rr = lane & 7;
  return f16_off(16 * np + 8 * (mi >> 1) + rr, 2 * ks + (mi & 1));
}
// O += P V, B fragments (transposed: a matrix row is 8 latent dims of one key) of keys
// 16 kp .. at latent dims 64 w + 16 dp ..: matrices (keys +0, dims +0), (+8, +0), (+0, +8),
// (+8, +8) give b0, b1 of n tile 2 dp and b0, b1 of n tile 2 dp + 1.
MLA_TC_HD int pv_ldsm_off(int lane, int kp, int w, int dp) {
  const int mi = lane >> 3, rr = lane & 7;
  return f16_off(16 * kp + 8 * (mi & 1) + rr, 8 * w + 2 * dp + (mi >> 1));
}

// cp.async: thread tid copies f32 chunks (tid & 7) + 8 j, j < 18, of tile row tid >> 3.
MLA_TC_HD int copy_row(int tid) { return tid >> 3; }
MLA_TC_HD int copy_chunk(int tid, int j) { return (tid & 7) + 8 * j; }

// ---- f16 staging (mla_decode_tc16_kernel<3>, the default, and <2>; TANDEM_CUDA_MLA_TC_STAGE
// selects: f16 / f16s2 / f32 for the f32-staging kernel above). Each thread loads its share
// of a later tile from global memory into registers (f32), rounds it to f16 there and
// stores f16 to shared memory, so shared memory is written 1152 bytes a key instead of 2304
// by cp.async plus 3456 of conversion traffic. A stage is one tile of 32 rows of 576 f16
// (1152 bytes a row, 72 16-byte chunks), chunk k of row r at chunk k ^ (r & 7) (the XOR
// keeps k's group of 8): every ldmatrix phase (8 consecutive rows, one logical chunk) hits
// 8 distinct 16-byte bank groups (1152 = 9 x 128). The partial scores and P get regions of
// their own after the stages: 2 stages and 3 barriers a tile (<2>: the next tile is stored
// while this one is read), or 3 stages and 2 barriers (<3>: the tile after next is stored,
// so P V of a tile and S of the next run back to back without a barrier between them).
namespace s16 {
constexpr int row_bytes = dim * 2;               // 1152
constexpr int stage_bytes = keys * row_bytes;    // 36,864
constexpr int loads = keys * dim / 4 / threads;  // 18 float4 loads per thread per tile
constexpr int loads_s = 6;  // loads held in registers over S (the other 12: over softmax and P V)
constexpr int sp_units = kparts * 2 * 4 * 2 * 32;  // 2048 16-byte units of partial scores
constexpr int pf_units = 4 * 2 * 32;               // 256 16-byte units of P fragments
// Shared memory of the kernel with `Stages` stages: the stages, Q fragments, partial
// scores, P fragments, the rows' corrections, the slot table.
template <int Stages>
struct regions {
  static constexpr int stages = Stages;
  static constexpr int off_qfrag = Stages * stage_bytes;
  static constexpr int off_sp = off_qfrag + qfrag_bytes;
  static constexpr int off_pf = off_sp + sp_units * 16;
  static constexpr int off_alpha = off_pf + pf_units * 16;
  static constexpr int off_slots = off_alpha + heads * 4;
  static constexpr int smem_bytes = off_slots + max_chunk * 4;  // 194,816 (2 stages), 231,680 (3)
  static_assert(smem_bytes <= 232448, "fits one H100 / H200 block");
  // Byte offset of tile tt's stage.
  static MLA_TC_HD int stage_off(int tt) { return static_cast<int>(static_cast<unsigned>(tt) % Stages) * stage_bytes; }
};
static_assert(keys * dim % (4 * threads) == 0 && loads % 2 == 0 && loads_s % 2 == 0);
static_assert(threads == 16 * (keys / 2) && dim == 64 * (loads / 2), "load i: a half-warp's 16 float4 of a row");

// Byte offset (in a stage) of f16 chunk k (dims 8k .. 8k+7) of row r.
MLA_TC_HD int f16_off(int r, int k) { return r * row_bytes + 16 * (k ^ (r & 7)); }
// Byte offset of the 4 f16 of dims c .. c+3 (c a multiple of 4) of row r: half a chunk.
MLA_TC_HD int half4_off(int r, int c) { return f16_off(r, c >> 3) + 2 * (c & 7); }

// Load i (0 .. loads) of thread tid: floats c .. c+3 of tile row r. Half-warp hw = tid >> 4
// takes rows hw and hw + 16 (i even / odd), 64 floats (256 contiguous bytes, two full
// 128-byte lines) of the row per load, lane l of the half-warp floats 4 l .. of them; its f16
// store (8 bytes) then fills one aligned 128-byte line of the stage (8 chunks of one row,
// permuted by the swizzle): each half-warp's 8-byte store meets each bank once.
MLA_TC_HD int load_row(int tid, int i) { return (tid >> 4) + 16 * (i & 1); }
MLA_TC_HD int load_col(int tid, int i) { return 64 * (i >> 1) + 4 * (tid & 15); }
// half4_off(load_row(tid, i), load_col(tid, i)) split into a per-thread base and a per-load
// step (a compile-time constant once the loads are unrolled).
MLA_TC_HD int load_dst_base(int tid) {
  const int r = tid >> 4, l = tid & 15;
  return r * row_bytes + 16 * ((l >> 1) ^ (r & 7)) + 8 * (l & 1);
}
MLA_TC_HD int load_dst_step(int i) { return 16 * row_bytes * (i & 1) + 128 * (i >> 1); }

// Partial scores: unit u = sp_hole(..) (0 .. 2048), lane-consecutive float4s; byte offset in
// the region.
MLA_TC_HD int sp_off(int u) { return 16 * u; }
// P as f16 A fragments of O += P V: m tile mt, k-step kp (16 keys), lane: 16 bytes, its
// two 8-byte halves the register pairs (a0, a2) and (a1, a3). The softmax thread of rows
// hi = 0 (g) or 1 (g + 8) writes pair (a_hi, a_hi+2), keys 16 kp + 2t .. and 16 kp + 8 +
// 2t .., with one 8-byte store at half hi ^ ((lane >> 3) & 1): lanes l and l + 8 of a
// half-warp (units 16 bytes apart, 128 bytes = the bank period apart) take opposite halves,
// so the store is conflict-free; the reader undoes the swap (pf_regs). Offsets in the region.
MLA_TC_HD int pf_off(int mt, int kp, int lane) { return 16 * ((mt * 2 + kp) * 32 + lane); }
MLA_TC_HD int pf_half(int hi, int lane) { return 8 * (hi ^ ((lane >> 3) & 1)); }
// The A fragment (a0, a1, a2, a3) from the 16 bytes (w0, w1, w2, w3) of lane's unit.
template <class U4>
MLA_TC_HD U4 pf_regs(const U4& w, int lane) {
  U4 a;
  const bool sw = ((lane >> 3) & 1) != 0;
  a.x = sw ? w.z : w.x;
  a.y = sw ? w.x : w.z;
  a.z = sw ? w.w : w.y;
  a.w = sw ? w.y : w.w;
  return a;
}
// ldmatrix.x4 row addresses, as qk_ldsm_off / pv_ldsm_off above over this stage layout.
MLA_TC_HD int qk_ldsm_off(int lane, int np, int ks) {
  const int mi = lane >> 3, rr = lane & 7;
  return f16_off(16 * np + 8 * (mi >> 1) + rr, 2 * ks + (mi & 1));
}
MLA_TC_HD int pv_ldsm_off(int lane, int kp, int w, int dp) {
  const int mi = lane >> 3, rr = lane & 7;
  return f16_off(16 * kp + 8 * (mi & 1) + rr, 8 * w + 2 * dp + (mi >> 1));
}
// L2 prefetch of a tile two ahead: lanes 0 .. 3 of warp w take rows 4 w + lane.
MLA_TC_HD int prefetch_row(int warp, int lane) { return 4 * warp + lane; }
static_assert(4 * warps == keys);
}  // namespace s16

// The work split (host): keys per split (a multiple of 32, at most max_chunk) and splits per
// row, from shapes only: rows, heads, the widest row's key count and the SM count. Cost in
// tile-times of s splits: waves of blocks (one block per SM) times each block's tiles plus
// its fixed work (~4 tiles: Q's 147 KB, start-up), plus the partials' write and merge (~2
// tiles a block, spread over the SMs). The least cost wins, ties to fewer splits.
struct split_plan {
  int chunk = keys, splits = 1, head_groups = 1;
};
inline split_plan plan_splits(int64_t rows, int n_heads, int64_t max_keys, int n_sm, int64_t max_splits = 1024) {
  split_plan p;
  p.head_groups = (std::max(n_heads, 1) + heads - 1) / heads;
  const int64_t tiles = std::max<int64_t>(1, (max_keys + keys - 1) / keys);
  const int64_t max_ct = max_chunk / keys, sms = std::max(n_sm, 1);
  const int64_t blocks_per = std::max<int64_t>(rows, 1) * p.head_groups;
  int64_t best = INT64_MAX, best_ct = std::min(tiles, max_ct);
  for (int64_t s = 1; s <= std::min(tiles, max_splits); ++s) {
    const int64_t ct = (tiles + s - 1) / s;  // tiles per split
    if (ct > max_ct) continue;
    const int64_t se = (tiles + ct - 1) / ct, blocks = blocks_per * se;
    const int64_t cost = (blocks + sms - 1) / sms * (ct + 4) + (se > 1 ? (2 * blocks + sms - 1) / sms : 0);
    if (cost < best) best = cost, best_ct = ct;
  }
  p.chunk = static_cast<int>(best_ct * keys);
  p.splits = static_cast<int>((tiles + best_ct - 1) / best_ct);
  return p;
}

}  // namespace tandem::cuda::mla_tc
