#pragma once
// What the MoE .cu files share: moe_forward's workspace (the grouping of (token, slot) pairs
// by expert that moe_plan writes and the expert kernels read) and the launchers between them.
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "moe_tiles.hpp"
#include "tandem_cuda/moe.hpp"

namespace tandem::cuda::moe_detail {

// Pair p = t * top_k + j (token t, slot j). The plan sorts the valid pairs by expert: "slot"
// s in [offsets[e], offsets[e] + counts[e]) is one of expert e's pairs (their order within an
// expert depends on atomics; nothing computed depends on it: each row is computed alone).
struct moe_ws {
  int* hdr;        // [0] active experts, [1] row tiles, [2] valid pairs
  int* counts;     // [E]
  int* offsets;    // [E + 1]
  int* active;     // [E]: the experts with pairs, ascending
  int4* tiles;     // [max_tiles]: expert, first slot, rows (<= the plan's cap, moe_tiles.hpp), 0
  int* pair_slot;  // [P]: slot of pair p, -1 when its id is outside [0, E)
  int* slot_tok;   // [P]: token of slot s
  int* slot_pair;  // [P]: pair of slot s
  __half* x16;     // mma: [tokens][hidden] f16 copy of x
  void* h;         // mma: __half [P][ffn]; gemv: float [P][ffn]
  float* y;        // [P][hidden]: each pair's down row (unweighted), indexed by pair
};

inline size_t align256(size_t b) { return (b + 255) / 256 * 256; }

// The workspace's tile list holds the smallest cap's worst case (moe_tiles.hpp).
inline int64_t max_tiles(int64_t E, int64_t P) { return max_tiles_for(E, P, tile_rows); }

struct moe_ws_layout {
  size_t off[11] = {};
  size_t total = 0;
  moe_ws_layout(const dev_experts& w, int64_t tokens, int top_k, moe_kernel k) {
    const auto E = static_cast<size_t>(w.n_experts);
    const auto P = static_cast<size_t>(std::max<int64_t>(tokens, 1) * top_k);
    const auto T = static_cast<size_t>(std::max<int64_t>(tokens, 1));
    const auto H = static_cast<size_t>(w.hidden), F = static_cast<size_t>(w.ffn);
    const bool mma = k == moe_kernel::mma;
    const size_t sizes[11] = {64,
                              E * 4,
                              (E + 1) * 4,
                              E * 4,
                              static_cast<size_t>(max_tiles(w.n_experts, static_cast<int64_t>(P))) * 16,
                              P * 4,
                              P * 4,
                              P * 4,
                              mma ? T * H * 2 : 0,
                              P * F * (mma ? 2 : 4),
                              P * H * 4};
    for (int i = 0; i < 11; ++i) off[i] = total, total += align256(sizes[i]);
  }
  moe_ws carve(void* base) const {
    auto* b = static_cast<uint8_t*>(base);
    return {reinterpret_cast<int*>(b + off[0]),     reinterpret_cast<int*>(b + off[1]),
            reinterpret_cast<int*>(b + off[2]),     reinterpret_cast<int*>(b + off[3]),
            reinterpret_cast<int4*>(b + off[4]),    reinterpret_cast<int*>(b + off[5]),
            reinterpret_cast<int*>(b + off[6]),     reinterpret_cast<int*>(b + off[7]),
            reinterpret_cast<__half*>(b + off[8]),  static_cast<void*>(b + off[9]),
            reinterpret_cast<float*>(b + off[10])};
  }
};

// moe_route.cu: one block groups the P pairs by expert (counts, exclusive scan, scatter) and
// lists the active experts and the row tiles of at most `cap` rows. E <= moe_max_experts.
void moe_plan(const int32_t* ids, int64_t P, int top_k, int E, int cap, const moe_ws& w, cudaStream_t stream);

// moe_grouped_mma.cu: the tensor-core grouped GEMMs. gate+up: h16[slot] = f16(silu(g) * u)
// of x16[slot_tok[slot]] against w13[e]; down: y[slot_pair[slot]] = h16[slot] w2[e]^T.
// Grids: (128-column blocks, the cap's max tiles); tiles past hdr[1] exit at once.
// moe_mma_row_cap: the plan's row cap these kernels take for E experts and P pairs on the
// current device (wide_cap when they run the wide kernel, else tile_rows).
int moe_mma_row_cap(int64_t E, int64_t P);
void moe_mma_gate_up(const dev_experts& w, int64_t P, const moe_ws& ws, cudaStream_t stream);
void moe_mma_down(const dev_experts& w, int64_t P, const moe_ws& ws, cudaStream_t stream);

}  // namespace tandem::cuda::moe_detail
