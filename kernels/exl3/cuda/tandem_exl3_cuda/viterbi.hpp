#pragma once
// The EXL3 tile coder on the GPU: the tail-biting Viterbi search of tandem_exl3/viterbi.hpp
// (exl3.md §5.7), bit for bit. Same fp16 arithmetic (d = __hsub(cb(s), w), cost =
// __hfma(d, d, prev), both single roundings as the CPU emulation), same tie rule (the lowest
// k for each edge, the lowest edge for pass 1's free end), same two passes (pass 1 rotated by
// 128 from free starts, pass 2 forced to start and end on E*). The argmins are taken on
// 32-bit keys (cost_bits << 16 | index): a min of such keys is the lexicographic (cost,
// index) minimum whatever the reduction order, so the result is deterministic and equals the
// CPU's strict-< scan.
//
//   size_t ws = tandem::exl3::cuda::viterbi_workspace_bytes(tiles, K);   // cudaMalloc it
//   viterbi_tiles(in_f16, tiles, K, 2 /*mul1*/, states, costs, workspace, stream);
//
// Every pointer is device memory; errors are reported through cudaGetLastError.
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::exl3::cuda {

// inputs_f16: [tiles][256] fp16 bits, trellis position order (the CPU coder rounds its float
// inputs to fp16 first: pass those bits). K: 1..8. cb: 0 = 3inst, 1 = mcg, 2 = mul1 (the
// values of tandem::exl3::codebook). states: [tiles][256]. costs: [tiles] (the fp16 path
// cost as float, the CPU encode()'s return value) or nullptr. workspace: at least
// viterbi_workspace_bytes(tiles, K) bytes (backpointers; independent of tiles beyond one
// tile per resident block). Returns without launching when tiles == 0.
void viterbi_tiles(const uint16_t* inputs_f16, int64_t tiles, int K, int cb, uint16_t* states,
                   float* costs, void* workspace, cudaStream_t stream);

// Workspace for viterbi_tiles on the current device: one backpointer slab (256 steps of at
// most 4 KiB: 1 MiB at K <= 4, 64 KiB at K = 8) per persistent block, min(tiles, resident
// blocks) blocks.
size_t viterbi_workspace_bytes(int64_t tiles, int K);

}  // namespace tandem::exl3::cuda
