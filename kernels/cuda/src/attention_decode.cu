// Decode attention: a few new tokens per sequence (one in a decode step, a token and its
// draft in a speculative verify), their keys split over the grid ("flash decoding"),
// everything of one layer's step in one launch.
//
// Layout of the work
//  - block = (split, KV head, token row); a row attends to its own causal prefix (its
//    sequence's keys up to its position), so the rows of one sequence are independent
//    blocks that read the same keys (from L2 after the first); the block's `chunk` keys are cut into one
//    contiguous run per warp, and each warp streams its run through a private ring of
//    `stages` shared-memory stages (tile = 32 keys x 32 dims of K and of V: 16 keys at
//    head_dim 64, 8 at 128; 512 bytes each in f32, 256 in bf16, 128 in fp8, kept in the
//    pool's element type) filled by 16-byte cp.async. No block barrier in
//    the loop: a warp waits only for its own tiles, so the SM's warps drift apart and keep
//    the memory system busy while others compute. With 2 stages a warp has its next tile
//    in flight while it computes one, and three blocks (12 warps, ~105 KB of tiles) fit
//    an SM: more blocks per SM measured better than deeper rings (4 stages: one block per
//    SM, 40% of copy; 3: two, 65%; 2: three, 73% at 32 sequences x 8k keys on the H200,
//    f32 pool). A bf16 / fp8 tile is 1/2 / 1/4 the bytes; deeper rings did not help them
//    (their time per key is set by the q.k / softmax / p.v work, not by bytes in flight:
//    1.21x / 1.38x faster than f32 for 1/2 / 1/4 the bytes), but shorter chunks did
//    (more blocks in the grid): plan_decode caps their chunk at 512;
//  - q.k: each lane owns one 32-dim segment of one key (head_dim / 32 lanes per key) and
//    reads it as 16-byte pieces (widened to f32) from a K row padded by 16 bytes per
//    segment (144, 80 or 48 bytes: lane L starts at L x that, so the 8 lanes of a
//    shared-memory phase hit 8 distinct 16-byte bank groups); the query heads of the
//    group (GQA) are broadcast reads of the rotated, scaled q. One shuffle per 32 dims
//    finishes a score;
//  - softmax: online per tile and warp (warp max, one expf per key and head), the tile's
//    probabilities go through a per-warp shared row and are read back as float4
//    broadcasts; p.v: each lane owns head_dim / 32 dims of the output, V rows are plain
//    contiguous reads;
//  - before the kernel waits for its predecessor (programmatic dependent launch): the
//    page table, the RoPE angles and the first stages - 1 tiles of every warp, which only
//    depend on host uploads and on the pool's older keys (every tandem kernel waits for
//    its predecessor before letting the next start, so a kernel two launches back has
//    finished). At batch 1 with short contexts a warp's whole run is in flight before
//    the q/k/v GEMV has finished;
//  - every block rotates its row's q; the step's new keys that fall in a block's range
//    (the row's own and its sequence's earlier new tokens) are rotated (RoPE, angles as
//    ref::rope_angle) and rounded to the pool's type by that block and patched into its
//    landed tiles (the pool slots it prefetched may be stale: other blocks write them in
//    this launch); the block holding a row's own key writes that k and v into the pool;
//  - the warps of a block merge in shared memory; with several splits the last block of
//    a (sequence, KV head) to finish merges the splits' partial results (a ticket
//    counter per pair, reset by that block), so no second launch is needed.
// fp32 arithmetic throughout on the stored keys and values (the new k and v are rounded to
// the pool's type before they are used, as later steps will read them): matches the
// reference on those values up to summation order.
#include <algorithm>
#include <cfloat>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "common.cuh"
#include "kv_elem.cuh"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {
namespace {

constexpr int warps = 4;
constexpr int threads = warps * 32;
constexpr int max_chunk = 1024;  // keys per block (plan_decode's largest chunk)
constexpr int min_chunk = 64;    // one 16-key tile per warp at head_dim 64
constexpr int max_rows = 16;     // new tokens of one sequence a step may have (a verify of 15 drafts)
// Ring depth, H200, 32 x 8k keys (bench_cuda_kernels, 503c355): f32 pool 133 us at 2 stages
// (three blocks per SM), 148 at 3, 244 at 4; bf16 105 / 110 / 145 (6 and 8: ~250); fp8 90 /
// 92 / 95 (8: 126). The narrow pools are not held back by bytes in flight (bf16 at 2 stages
// moves 45% of copy bandwidth): 2 stages everywhere. Deeper rings stay selectable for
// tests and benches (TANDEM_CUDA_DECODE_STAGES), up to what fits the shared memory.
constexpr int default_stages = 2;
constexpr int max_stages_of(kv_elem e) { return e == kv_elem::f32 ? 4 : 8; }  // cp_async_wait goes to 7

template <int HD>
struct decode_partial {  // one split's unnormalised result for one query head
  float acc[HD];
  float m, l;
};

// Tile geometry for head_dim HD and pool element type E (sizes in elements of E unless
// named bytes).
template <int HD, kv_elem E>
struct tile_shape {
  static constexpr int eb = detail::kv_bytes<E>;  // bytes per element
  static constexpr int per16 = 16 / eb;           // elements per 16-byte piece
  static constexpr int lpk = HD / 32;             // lanes per key in q.k (32 dims each)
  static constexpr int keys = 32 / lpk;           // keys per tile
  static constexpr int seg = 32 + per16;          // a 32-dim K segment in shared memory, 16 bytes of padding
  static constexpr int krow = lpk * seg;          // a K row (padded)
  static constexpr int vrow = HD;                 // a V row (every lane reads one row)
  static constexpr int stage = keys * (krow + vrow);  // one stage
  static constexpr int stage_bytes = stage * eb;
  static constexpr int dpl = HD / 32;             // output dims per lane in p.v
  static constexpr int pieces = HD / per16;       // 16-byte pieces per row
  static constexpr int loads = keys * pieces / 32;    // 16-byte pieces per lane per tile, K or V
  static_assert(keys * lpk == 32 && loads * 32 == keys * pieces && stage_bytes % 16 == 0);
};

__device__ __forceinline__ void cp_async16(void* smem, const void* gmem, bool valid) {
  const unsigned dst = static_cast<unsigned>(__cvta_generic_to_shared(smem));
  const int n = valid ? 16 : 0;  // 0: the 16 bytes are zero-filled, nothing is read
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(dst), "l"(gmem), "r"(n) : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
// Waits until at most n of this thread's groups are pending (n: 0 .. 7).
__device__ __forceinline__ void cp_async_wait(int n) {
  switch (n) {
    case 0: asm volatile("cp.async.wait_group 0;" ::: "memory"); break;
    case 1: asm volatile("cp.async.wait_group 1;" ::: "memory"); break;
    case 2: asm volatile("cp.async.wait_group 2;" ::: "memory"); break;
    case 3: asm volatile("cp.async.wait_group 3;" ::: "memory"); break;
    case 4: asm volatile("cp.async.wait_group 4;" ::: "memory"); break;
    case 5: asm volatile("cp.async.wait_group 5;" ::: "memory"); break;
    case 6: asm volatile("cp.async.wait_group 6;" ::: "memory"); break;
    default: asm volatile("cp.async.wait_group 7;" ::: "memory"); break;
  }
}

// (cos, sin) of pair p at `pos`: the host-made table when it covers pos, else computed in
// double as ref::rope_angle does.
__device__ __forceinline__ float2 rope_cs(const dev_rope& r, int rot, int pos, int p) {
  if (r.table != nullptr && pos < r.table_positions) return r.table[int64_t{pos} * (rot / 2) + p];
  const double angle = static_cast<double>(pos) * pow(static_cast<double>(r.theta), -2.0 * p / rot);
  return make_float2(static_cast<float>(cos(angle)), static_cast<float>(sin(angle)));
}

// Rotates pair p of v by (cos, sin): one expression for every rotation here, so a key
// rotated as an earlier new key of a verify block gets the bits its own decode step gives it.
__device__ __forceinline__ void rotate_pair(float* v, int p, int half, bool neox, float2 cs) {
  const int a = neox ? p : 2 * p, b = neox ? p + half : 2 * p + 1;
  const float x0 = v[a], x1 = v[b];
  v[a] = x0 * cs.x - x1 * cs.y;
  v[b] = x0 * cs.y + x1 * cs.x;
}

// Rotates the head_dim floats at v (shared memory) in place with the pairs' (cos, sin).
__device__ void rotate(float* v, const float2* cs, int half, bool neox, int tid, int nthreads) {
  for (int p = tid; p < half; p += nthreads) rotate_pair(v, p, half, neox, cs[p]);
}

// The same at position `pos`, each pair's (cos, sin) looked up as it is used (a verify
// block's earlier new keys, one rotation each).
__device__ void rotate_at(float* v, const dev_rope& r, int rot, int pos, int tid, int nthreads) {
  const int half = rot / 2;
  for (int p = tid; p < half; p += nthreads) rotate_pair(v, p, half, r.neox, rope_cs(r, rot, pos, p));
}

// Dynamic shared memory: the warps' rings (each reused for its warp's merge row), slots of
// the block's keys, q, the new k and v (up to `rows` of each), RoPE (cos, sin), per-warp
// probabilities.
template <int HD, int GM, kv_elem E>
constexpr size_t decode_smem_bytes(int stages, int rows) {
  using T = tile_shape<HD, E>;
  return size_t{warps} * stages * T::stage_bytes +
         (GM * HD + 2 * static_cast<size_t>(rows) * HD + HD + size_t{warps} * GM * T::keys) * sizeof(float) +
         max_chunk * sizeof(int32_t);
}
template <int HD, kv_elem E>
constexpr bool ring_holds_merge_row = 2 * tile_shape<HD, E>::stage_bytes >= 8 * (HD + 2) * 4;
static_assert(ring_holds_merge_row<64, kv_elem::f32> && ring_holds_merge_row<128, kv_elem::f32> &&
                  ring_holds_merge_row<64, kv_elem::bf16> && ring_holds_merge_row<128, kv_elem::bf16> &&
                  ring_holds_merge_row<64, kv_elem::fp8_e4m3> && ring_holds_merge_row<128, kv_elem::fp8_e4m3>,
              "a warp's ring of 2 stages holds its merge row");

template <int HD, int GM, kv_elem E>
__global__ void __launch_bounds__(threads)
    decode_kernel(const float* __restrict__ q, const float* __restrict__ k_new, const float* __restrict__ v_new,
                  int n_heads, dev_kv kv, dev_batch b, dev_rope rope, float scale, int chunk, int n_splits,
                  int stages, int rows_cap, decode_partial<HD>* __restrict__ parts, int* __restrict__ tickets,
                  float* __restrict__ out) {
  using T = tile_shape<HD, E>;
  using elem = detail::kv_t<E>;
  extern __shared__ __align__(16) unsigned char smem[];
  unsigned char* rings = smem;                                     // [warps][stages][K tile, V tile] of elem
  float* qs = reinterpret_cast<float*>(rings + warps * stages * T::stage_bytes);  // [GM][HD], rotated and scaled
  float* kn = qs + GM * HD;  // [rows_cap][HD]: the step's new keys in this block (rotated, as stored)
  float* vn = kn + rows_cap * HD;                                   // [rows_cap][HD]: their values
  auto* cs = reinterpret_cast<float2*>(vn + rows_cap * HD);        // [HD / 2]
  float* probs = reinterpret_cast<float*>(cs + HD / 2);            // [warps][GM][keys]
  auto* slots = reinterpret_cast<int32_t*>(probs + warps * GM * T::keys);  // [chunk], -1: unreadable
  __shared__ bool last;

  const int split = blockIdx.x, kvh = blockIdx.y, row = blockIdx.z;
  const int G = n_heads / kv.n_kv_heads;
  const int tid = threadIdx.x, lane = tid & 31, warp = tid >> 5;
  const int64_t ts = int64_t{kv.n_kv_heads} * HD;  // elements per pool token (all KV heads)
  elem* pool_k = static_cast<elem*>(kv.k);
  elem* pool_v = static_cast<elem*>(kv.v);
  const int64_t pool_tokens = kv.n_pages * kv.page_size;

  // Before waiting for the previous kernel: host uploads and the pool's older keys only.
  // The row's sequence s and its new tokens (rows q0 .. q0 + qn - 1, positions first_new ..
  // seq_len - 1); a decode step's row is its sequence's one new token.
  int s = row, q0 = row, qn = 1;
  if (b.n_tokens != b.n_seqs) {
    int lo = 0, hi = b.n_seqs - 1;  // the last s with query_start[s] <= row
    while (lo < hi) {
      const int mid = (lo + hi + 1) / 2;
      if (b.query_start[mid] <= row) lo = mid;
      else hi = mid - 1;
    }
    s = lo, q0 = b.query_start[s], qn = b.query_start[s + 1] - q0;
  }
  const int seq_len = b.seq_lens[s], first_new = seq_len - qn;
  const int pos = first_new + (row - q0), len = pos + 1;  // this row attends to keys 0 .. pos
  const int n_active = (len + chunk - 1) / chunk;
  if (split >= n_active) return;  // past this row's keys (the grid is sized for the widest)
  if (qn > rows_cap) {  // the host's bound on new tokens per sequence was wrong: no silent answer
    for (int i = tid; i < n_heads / kv.n_kv_heads * HD; i += threads)
      out[(int64_t{row} * n_heads + kvh * (n_heads / kv.n_kv_heads)) * HD + i] = nanf("");
    return;
  }
  const int k0 = split * chunk, n_keys = min(len, k0 + chunk) - k0;
  const bool has_new = split == n_active - 1;  // this block holds the row's own key
  // The step's new keys in this block's range: positions nb .. nb + nn - 1 (block-relative
  // nb - k0 ..), the row's own key last when has_new.
  const int nb = max(first_new, k0), nn = max(0, k0 + n_keys - nb);
  for (int i = tid; i < n_keys; i += threads) {
    const int t = k0 + i;
    const int32_t page = b.page_table[int64_t{s} * b.max_pages + t / kv.page_size];
    slots[i] = page >= 0 && page < kv.n_pages ? page * kv.page_size + t % kv.page_size : -1;
  }
  const int rot = rope.rotary_dims == 0 ? HD : rope.rotary_dims;
  if (rope.on) {
    for (int p = tid; p < rot / 2; p += threads) cs[p] = rope_cs(rope, rot, pos, p);
  }
  __syncthreads();

  // This warp's run of keys (block-relative [w0, w1)) and its ring.
  const int per_warp = chunk / warps;
  const int w0 = min(n_keys, warp * per_warp), w1 = min(n_keys, w0 + per_warp);
  const int n_tiles = (w1 - w0 + T::keys - 1) / T::keys;
  unsigned char* ring = rings + warp * stages * T::stage_bytes;
  auto stage_k = [&](int t) { return reinterpret_cast<elem*>(ring + (t % stages) * T::stage_bytes); };
  auto issue = [&](int t) {  // tile t of the run: K and V rows, zero past the run and for bad slots
    if (t < n_tiles) {
      elem* kt = stage_k(t);
      elem* vt = kt + T::keys * T::krow;
#pragma unroll
      for (int i = 0; i < T::loads; ++i) {
        const int c = i * 32 + lane, r = c / T::pieces, e0 = (c % T::pieces) * T::per16;  // first dim of the piece
        const int key = w0 + t * T::keys + r;
        const int64_t slot = key < w1 ? slots[key] : -1;
        const int64_t off = (slot >= 0 ? slot : 0) * ts + kvh * HD + e0;
        cp_async16(kt + r * T::krow + (e0 / 32) * T::seg + e0 % 32, pool_k + off, slot >= 0);
        cp_async16(vt + r * T::vrow + e0, pool_v + off, slot >= 0);
      }
    }
    cp_async_commit();  // empty groups keep the wait counts uniform
  };
  for (int t = 0; t < stages - 1; ++t) issue(t);

  detail::pdl_wait();  // q, k_new, v_new come from the previous kernel
  detail::pdl_trigger();
  for (int i = tid; i < G * HD; i += threads) qs[i] = q[(int64_t{row} * n_heads + kvh * G) * HD + i];
  const int tok0 = q0 + (nb - first_new);  // the token row of new key nb
  for (int i = tid; i < nn * HD; i += threads) {
    const int64_t src = int64_t{tok0 + i / HD} * ts + kvh * HD + i % HD;
    kn[i] = k_new[src];
    vn[i] = v_new[src];
  }
  __syncthreads();
  if (rope.on) {
    for (int g = warp; g < G; g += warps) rotate(qs + g * HD, cs, rot / 2, rope.neox, lane, 32);
    if (has_new && warp == warps - 1) rotate(kn + (nn - 1) * HD, cs, rot / 2, rope.neox, lane, 32);
    for (int j = warp; j < nn - (has_new ? 1 : 0); j += warps)  // earlier new keys, at their own positions
      rotate_at(kn + j * HD, rope, rot, nb + j, lane, 32);
    __syncthreads();
  }
  // The new keys and values as stored (this step sees what later ones will); the row's own
  // joins the pool for later steps.
  const int64_t slot = has_new ? b.slot_mapping[row] : -1;
  const bool in_pool = slot >= 0 && slot < pool_tokens;
  for (int i = tid; i < nn * HD; i += threads) {
    const elem ke = detail::kv_store<E>(kn[i]), ve = detail::kv_store<E>(vn[i]);
    if (in_pool && i / HD == nn - 1) {
      pool_k[slot * ts + kvh * HD + i % HD] = ke;
      pool_v[slot * ts + kvh * HD + i % HD] = ve;
    }
    kn[i] = detail::kv_load<E>(ke), vn[i] = detail::kv_load<E>(ve);
  }
  for (int i = tid; i < G * HD; i += threads) qs[i] *= scale;  // scale folded into q once
  __syncthreads();

  float m[GM], l[GM], acc[GM][T::dpl];
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    m[g] = -INFINITY, l[g] = 0.0f;
#pragma unroll
    for (int d = 0; d < T::dpl; ++d) acc[g][d] = 0.0f;
  }
  const int r = lane / T::lpk, h = lane % T::lpk;  // q.k: key r of a tile, dims 32 h ..
  float* wp = probs + warp * GM * T::keys;
  const int new0 = nb - k0, new1 = new0 + nn;  // block-relative range of the new keys

  for (int t = 0; t < n_tiles; ++t) {
    issue(t + stages - 1);
    cp_async_wait(stages - 1);
    __syncwarp();
    elem* kt = stage_k(t);
    elem* vt = kt + T::keys * T::krow;
    const int tile0 = w0 + t * T::keys;
    if (new1 > tile0 && new0 < tile0 + T::keys) {  // landed slots of new keys may be stale
      for (int key = max(new0, tile0); key < min(new1, tile0 + T::keys); ++key) {
        const int pr = key - tile0, j = key - new0;
        for (int d = lane; d < HD; d += 32) {  // kn, vn hold stored values: exact in elem
          kt[pr * T::krow + (d / 32) * T::seg + d % 32] = detail::kv_store<E>(kn[j * HD + d]);
          vt[pr * T::vrow + d] = detail::kv_store<E>(vn[j * HD + d]);
        }
      }
      __syncwarp();
    }
    // q.k for key r of the tile, dims 32 h .. 32 h + 31.
    const int key = tile0 + r;
    const bool ok = key < w1 && slots[key] >= 0;
    float kx[32];
    detail::kv_load_n<E, 32>(kt + r * T::krow + h * T::seg, kx);
#pragma unroll
    for (int g = 0; g < GM; ++g) {
      if (g < G) {
        const float4* qr = reinterpret_cast<const float4*>(qs + g * HD + h * 32);
        float d = 0.0f;
#pragma unroll
        for (int c = 0; c < 8; ++c) {
          const float4 qv = qr[c];
          d = fmaf(qv.x, kx[4 * c], fmaf(qv.y, kx[4 * c + 1], fmaf(qv.z, kx[4 * c + 2], fmaf(qv.w, kx[4 * c + 3], d))));
        }
#pragma unroll
        for (int o = T::lpk / 2; o > 0; o >>= 1) d += __shfl_xor_sync(0xffffffffu, d, o);
        // Online softmax over the tile (warp-uniform m, so the branch is too).
        const float sc = ok ? d : -INFINITY;
        const float m_new = fmaxf(m[g], detail::warp_max(sc));
        float p = 0.0f;
        if (m_new != -INFINITY) {  // false only while no readable key has been seen
          const float corr = expf(m[g] - m_new);
          l[g] *= corr;
#pragma unroll
          for (int dd = 0; dd < T::dpl; ++dd) acc[g][dd] *= corr;
          m[g] = m_new;
          p = ok ? expf(sc - m_new) : 0.0f;
        }
        if (h == 0) wp[g * T::keys + r] = p;
      }
    }
    __syncwarp();
    // p.v: lane owns dims dpl * lane ..; probabilities read back four keys at a time.
#pragma unroll
    for (int j4 = 0; j4 < T::keys; j4 += 4) {
      float vx[4][T::dpl];
#pragma unroll
      for (int jj = 0; jj < 4; ++jj) detail::kv_load_n<E, T::dpl>(vt + (j4 + jj) * T::vrow + lane * T::dpl, vx[jj]);
#pragma unroll
      for (int g = 0; g < GM; ++g) {
        if (g < G) {
          const float4 p4 = *reinterpret_cast<const float4*>(wp + g * T::keys + j4);
          const float pj[4] = {p4.x, p4.y, p4.z, p4.w};
#pragma unroll
          for (int jj = 0; jj < 4; ++jj) {
            l[g] += pj[jj];
#pragma unroll
            for (int dd = 0; dd < T::dpl; ++dd) acc[g][dd] = fmaf(pj[jj], vx[jj][dd], acc[g][dd]);
          }
        }
      }
    }
    __syncwarp();  // the stage is refilled and the probabilities rewritten next tile
  }
  cp_async_wait(0);
  __syncwarp();

  // Merge the warps of this block (each warp's row in its own ring).
  float* mine = reinterpret_cast<float*>(ring);  // [GM][HD] acc, then m [GM], l [GM]
#pragma unroll
  for (int g = 0; g < GM; ++g) {
    if (g < G) {
#pragma unroll
      for (int dd = 0; dd < T::dpl; ++dd) mine[g * HD + lane * T::dpl + dd] = acc[g][dd];
      if (lane == 0) mine[GM * HD + g] = m[g], mine[GM * HD + GM + g] = l[g];
    }
  }
  __syncthreads();
  const bool alone = n_active == 1;  // one split: this block's result is the answer
  for (int i = tid; i < G * HD; i += threads) {
    const int g = i / HD, d = i % HD;
    float M = -INFINITY;
    auto row_of = [&](int w) { return reinterpret_cast<const float*>(rings + w * stages * T::stage_bytes); };
    for (int w = 0; w < warps; ++w) M = fmaxf(M, row_of(w)[GM * HD + g]);
    float num = 0.0f, den = 0.0f;
    for (int w = 0; w < warps; ++w) {
      const float* row = row_of(w);
      const float mw = row[GM * HD + g];
      if (mw == -INFINITY) continue;  // a warp with no readable keys
      const float e = expf(mw - M);
      num = fmaf(e, row[g * HD + d], num);
      den = fmaf(e, row[GM * HD + GM + g], den);
    }
    if (alone) {
      out[(int64_t{row} * n_heads + kvh * G + g) * HD + d] = num / den;
      continue;
    }
    decode_partial<HD>& P = parts[(int64_t{row} * n_heads + kvh * G + g) * n_splits + split];
    P.acc[d] = num;
    if (d == 0) P.m = M, P.l = den;
  }
  if (alone) return;
  // The last block of this (sequence, KV head) to get here merges every split.
  __threadfence();
  __syncthreads();
  if (tid == 0) {
    int* ticket = tickets + int64_t{row} * kv.n_kv_heads + kvh;
    last = atomicAdd(ticket, 1) == n_active - 1;
    if (last) *ticket = 0;  // ready for the next launch
  }
  __syncthreads();
  if (!last) return;
  __threadfence();
  for (int i = tid; i < G * HD; i += threads) {
    const int g = i / HD, d = i % HD;
    const decode_partial<HD>* P = parts + (int64_t{row} * n_heads + kvh * G + g) * n_splits;
    float M = -INFINITY;
    for (int j = 0; j < n_active; ++j) M = fmaxf(M, __ldcg(&P[j].m));
    float num = 0.0f, den = 0.0f;
    for (int j = 0; j < n_active; ++j) {
      const float mj = __ldcg(&P[j].m);
      if (mj == -INFINITY) continue;
      const float e = expf(mj - M);
      num = fmaf(e, __ldcg(&P[j].acc[d]), num);
      den = fmaf(e, __ldcg(&P[j].l), den);
    }
    out[(int64_t{row} * n_heads + kvh * G + g) * HD + d] = num / den;
  }
}

}  // namespace

int decode_max_stages(kv_elem type) { return max_stages_of(type); }
int decode_max_rows() { return max_rows; }

decode_plan plan_decode(int n_seqs, int n_kv_heads, int max_pages, int page_size, int head_dim, int n_heads,
                        kv_elem type, int n_rows) {
  if (n_rows <= 0) n_rows = n_seqs;
  if (n_rows < n_seqs) throw std::invalid_argument("plan_decode: fewer token rows than sequences");
  // Keys per block: the largest of 1024 ... 64 that still gives four blocks per SM of an
  // H200-sized GPU (132 SMs; three fit at a time) when every sequence is at the page
  // table's full width, so the last wave is a small part of a long-context step; short
  // chunks at small batches, where the step is a latency chain and a warp's whole run can
  // be requested before the previous kernel ends. By sequences, not rows: a verify step's
  // rows split their keys as a decode step of its batch does, so each row sums its keys in
  // the order plain decoding of that token would.
  const int64_t keys = int64_t{max_pages} * page_size;
  // bf16 / fp8 pools at 32 x 8k keys: 95 / 83 us with 512-key chunks against 105 / 90 with
  // 1024 (f32: 141 against 133), so their chunks stop at 512.
  int chunk = type == kv_elem::f32 ? max_chunk : max_chunk / 2;
  while (chunk > min_chunk && (keys + chunk - 1) / chunk * n_seqs * n_kv_heads < 4 * 132) chunk /= 2;
  // TANDEM_CUDA_DECODE_CHUNK=64|128|...|1024 forces it (tests reach long chunks with few sequences).
  if (const char* e = std::getenv("TANDEM_CUDA_DECODE_CHUNK")) {
    const int c = std::atoi(e);
    if (c >= min_chunk && c <= max_chunk && (c & (c - 1)) == 0) chunk = c;
  }
  decode_plan p;
  p.chunk = chunk;
  p.splits = static_cast<int>((keys + chunk - 1) / chunk);
  // Every sequence has at least one of the rows, so none has more than n_rows - n_seqs + 1.
  p.rows_per_seq = std::min(max_rows, n_rows - n_seqs + 1);
  p.scratch_bytes = static_cast<size_t>(n_rows) * n_heads * p.splits * (head_dim + 2) * sizeof(float);
  p.ticket_bytes = static_cast<size_t>(n_rows) * n_kv_heads * sizeof(int);
  // TANDEM_CUDA_DECODE_STAGES=2..decode_max_stages sets the ring depth (tests run each;
  // benches sweep it).
  p.stages = default_stages;
  if (const char* e = std::getenv("TANDEM_CUDA_DECODE_STAGES")) {
    const int st = std::atoi(e);
    if (st >= 2 && st <= max_stages_of(type)) p.stages = st;
  }
  return p;
}

void attention_decode(const float* q, const float* k, const float* v, int n_heads, const dev_kv& kv,
                      const dev_batch& b, const dev_rope& rope, float scale, float* out,
                      const decode_plan& plan, void* scratch, int* tickets, cudaStream_t stream) {
  if (b.n_seqs == 0) return;
  if (plan.rows_per_seq < 1 || plan.rows_per_seq > max_rows || (b.n_tokens == b.n_seqs) != (plan.rows_per_seq == 1))
    throw std::invalid_argument("attention_decode: the plan was made for another batch shape");
  if (plan.chunk < min_chunk || plan.chunk > max_chunk || plan.chunk % min_chunk != 0)
    throw std::invalid_argument("attention_decode: chunk out of range");
  if (plan.stages < 2 || plan.stages > max_stages_of(kv.type))
    throw std::invalid_argument("attention_decode: stages out of range for the pool's element type");
  const dim3 grid(static_cast<unsigned>(plan.splits), static_cast<unsigned>(kv.n_kv_heads),
                  static_cast<unsigned>(b.n_tokens));
  const int G = n_heads / kv.n_kv_heads;
  auto launch = [&](auto hd, auto gm, auto et) {
    constexpr int HD = decltype(hd)::value, GM = decltype(gm)::value;
    constexpr kv_elem E = decltype(et)::value;
    static bool sized[16] = {};  // the attribute is per device: room for the deepest ring once
    int dev = 0;
    cudaGetDevice(&dev);
    if (!sized[dev & 15]) {
      cudaFuncSetAttribute(decode_kernel<HD, GM, E>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                           static_cast<int>(decode_smem_bytes<HD, GM, E>(max_stages_of(E), max_rows)));
      sized[dev & 15] = true;
    }
    detail::launch_pdl(decode_kernel<HD, GM, E>, grid, dim3(threads),
                       decode_smem_bytes<HD, GM, E>(plan.stages, plan.rows_per_seq), stream, q, k, v, n_heads, kv, b,
                       rope, scale, plan.chunk, plan.splits, plan.stages, plan.rows_per_seq,
                       static_cast<decode_partial<HD>*>(scratch), tickets, out);
  };
  auto by_group = [&](auto hd, auto et) {
    if (G <= 1) launch(hd, std::integral_constant<int, 1>{}, et);
    else if (G <= 2) launch(hd, std::integral_constant<int, 2>{}, et);
    else if (G <= 4) launch(hd, std::integral_constant<int, 4>{}, et);
    else launch(hd, std::integral_constant<int, 8>{}, et);
  };
  detail::with_kv_elem(kv.type, [&](auto et) {
    if (kv.head_dim == 64) by_group(std::integral_constant<int, 64>{}, et);
    else by_group(std::integral_constant<int, 128>{}, et);
  });
}

}  // namespace tandem::cuda
