#pragma once
// A mixture-of-experts MLP over EXL3 experts on the GPU ("fat-expert" path), and the
// per-expert loop a naive engine runs, as the baseline. For T tokens x [T][hidden] (f32),
// top-k routing ids [T][topk] (int32) and weights [T][topk] (f32), and E experts, each a gate
// and an up linear {hidden -> width} and a down linear {width -> hidden} (dev_exl3, all with
// the same K, codebook and shapes, no bias):
//
//   y[t] = sum_j w[t][j] * down_e(silu(gate_e(x_t)) * up_e(x_t)),   e = ids[t][j]
//
// with each linear rounded as exl3_gemv / linear_ref(rounding::gpu) rounds it (fp16 input,
// fp16 rotated input, f32 accumulation, fp16 output), silu(g) * u = g / (1 + exp(-g)) * u
// in f32 on the fp16-valued g and u, and the weighted sum in f32 in j order (one rounded
// multiply and one rounded add per term). Ids outside [0, E) are skipped (their term is 0),
// so an expert-parallel shard can pass the ids of other shards as -1.
//
// The fat path (exl3_moe_forward) is five launches and no host round trip, so it can be
// captured in a CUDA graph (the grids depend only on T and the shapes, all routing-dependent
// sizes live on the device):
//   1. route: one CTA counting-sorts the T*topk (token, expert) pairs by expert (per-expert
//      counts and offsets, the sorted slots' token and expert, each pair's slot), cuts every
//      expert's list into chunks of up to 64 rows and sizes the two work lists below;
//   2. input: each sorted slot's x row, rotated twice (gate suh, up suh) to fp16;
//   3. gate+up: ONE persistent launch over every active expert. A work unit is (chunk,
//      128-column tile, k split); CTAs take units from an atomic ticket. The 8 warps of a CTA
//      split the columns, one 16-column tile of gate and of up each, and share the chunk's
//      rows (staged in shared memory with cp.async, with the trellis of the next stages):
//      each warp decodes its own tiles straight into mma B fragments (the trellis is stored
//      in fragment order, so no shared-memory round trip of decoded weights is needed) and
//      runs m16n8k16 over the active 16-row blocks of the chunk (1 for a decode-sized chunk,
//      up to 4 in prefill), f32 accumulation. The epilogue does the output Hadamard x svh of
//      gate and up, silu(g) * u, and the down projection's input suh + Hadamard, and writes
//      the fp16 rotated down input. With few units (decode: every chunk <= 16 rows and fewer
//      units than resident CTAs) the k range is split; each split stores an f32 partial and
//      the last CTA to finish a unit sums them in split order and runs the epilogue;
//   4. down: the same kernel over (chunk, 256-column tile, k split) of the down linears,
//      epilogue output Hadamard x svh, fp16 result per sorted slot;
//   5. combine: y[t] = sum_j w[t][j] * d[slot(t, j)] in j order, every element of y written.
// Nothing uses float atomics: the result does not depend on the run (only on the routing).
//
//   exl3_moe_shape s{256, 8, 6144, 2048, 4, 2};
//   std::vector<exl3_moe_expert> t = exl3_moe_table(s, gate, up, down);  // host dev_exl3 arrays
//   // upload t (E * sizeof(exl3_moe_expert) bytes) to the device: `table`
//   void* ws = ...;  // exl3_moe_workspace_bytes(s, max_tokens) bytes, 256-byte aligned
//   exl3_moe_forward(s, table, x, T, ids, weights, y, ws, bytes, stream);
//
// Every pointer passed to the launchers is device memory (x and y 16-byte aligned, trellises
// 16-byte aligned); launches go on `stream` with programmatic dependent launch (unless
// TANDEM_CUDA_PDL=0) and report errors through cudaGetLastError. Shape errors throw
// std::invalid_argument; a device that cannot run the kernels throws std::runtime_error.
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <vector>

#include "tandem_exl3_cuda/exl3_cuda.hpp"

namespace tandem::exl3::cuda {

// The experts' shapes (padded sizes, multiples of 128) and format, common to all experts.
struct exl3_moe_shape {
  int64_t experts = 0;  // E, 1..exl3_moe_max_experts
  int64_t topk = 0;     // routed experts per token, >= 1
  int64_t hidden = 0;   // gate/up k, down n
  int64_t width = 0;    // gate/up n, down k (the expert's intermediate size)
  int K = 4;            // bits per weight, 1..8
  int cb = 2;           // codebook: 0 = 3inst, 1 = mcg, 2 = mul1
};

inline constexpr int64_t exl3_moe_max_experts = 1024;
// Rows of one work chunk (the mma M of a CTA); an expert with more tokens has several.
inline constexpr int64_t exl3_moe_chunk_rows = 64;

// The device-side record of one expert that the kernels read: device pointers of its gate,
// up and down linears (index 0, 1, 2).
struct exl3_moe_expert {
  const uint16_t* trellis[3] = {};
  const __half* suh[3] = {};
  const __half* svh[3] = {};
};

// The table of E records from three host arrays of E dev_exl3 each (gate[e], up[e], down[e]),
// checked against the shape (K, codebook, k and n, no bias, 16-byte aligned trellis). The
// caller copies it to the device (exl3_moe_forward reads it there).
std::vector<exl3_moe_expert> exl3_moe_table(const exl3_moe_shape& s, const dev_exl3* gate, const dev_exl3* up,
                                            const dev_exl3* down);

// Workspace of exl3_moe_forward for up to `max_tokens` tokens: the routing (a few int32 per
// pair), the rotated gate/up inputs (2 * hidden fp16 per pair), the down inputs (width fp16
// per pair), the down outputs (hidden fp16 per pair) and 16 MiB of split-k partials. GLM-5
// shapes (hidden 6144, width 2048, top-8): 328 KB per token, 1.36 GB at 4096 tokens.
size_t exl3_moe_workspace_bytes(const exl3_moe_shape& s, int64_t max_tokens);

// y [tokens][hidden] = the MoE MLP of x [tokens][hidden] (see the top of this file).
// `table` is the device copy of exl3_moe_table; `workspace` holds at least
// exl3_moe_workspace_bytes(s, tokens) bytes. tokens == 0 launches nothing.
void exl3_moe_forward(const exl3_moe_shape& s, const exl3_moe_expert* table, const float* x, int64_t tokens,
                      const int32_t* ids, const float* weights, float* y, void* workspace, size_t workspace_bytes,
                      cudaStream_t stream);

// Device pointers into the workspace, valid after a forward of `tokens` tokens completes:
// the tokens routed to each expert (int32 [E]) and the exclusive prefix sum (int32 [E + 1],
// the last entry the number of valid pairs).
const int32_t* exl3_moe_counts(const exl3_moe_shape& s, int64_t tokens, const void* workspace);
const int32_t* exl3_moe_offsets(const exl3_moe_shape& s, int64_t tokens, const void* workspace);

// What the route kernel of the last forward decided (read back synchronously on `stream`).
struct exl3_moe_stats {
  int valid_pairs = 0, active_experts = 0, chunks = 0, max_chunk_rows = 0;
  int k_splits[2] = {};  // gate+up, down
  int units[2] = {};     // work units of the gate+up and the down launch
  int ctas[2] = {};      // persistent CTAs of those launches (resident on this device)
};
exl3_moe_stats exl3_moe_read_stats(const exl3_moe_shape& s, int64_t tokens, const void* workspace,
                                   cudaStream_t stream);

// Test and bench helpers (device-side, asynchronous): `count` uint16 trellis words from a
// hash of (index, seed) (any bits are a valid trellis), and `count` fp16 scales of random
// sign and magnitude uniform in [0.5, 1.5) times `scale`.
void exl3_moe_fill_random_words(uint16_t* dst, size_t count, uint64_t seed, cudaStream_t stream);
void exl3_moe_fill_random_scales(__half* dst, size_t count, uint64_t seed, float scale, cudaStream_t stream);

// ---------------------------------------------------------------------------------------
// Baseline: the per-expert loop (what a naive engine does). The routing is grouped on the
// host at construction (the token lists are uploaded then, synchronously); run() then only
// launches, per expert with tokens: a gather of its rows, gate and up (exl3_gemv for <= 16
// rows, else exl3_reconstruct + `gemm` + the Hadamard transforms), silu * mul, down, and a
// weighted scatter-add into y (float atomics, so the sum order of a token's experts varies).
// run() can be captured in a CUDA graph when `gemm` can.

// c [m][n] (f32) = a [m][k] (fp16) * b [k][n] (fp16), all row-major, f32 accumulation,
// on `stream` (e.g. cublasGemmEx with CUBLAS_COMPUTE_32F).
using exl3_gemm_fn =
    std::function<void(const __half* a, const __half* b, float* c, int64_t m, int64_t k, int64_t n, cudaStream_t)>;

class exl3_moe_loop {
 public:
  // gate, up, down: host arrays of E linears (device pointers inside); ids, weights: HOST
  // arrays [tokens][topk]. Allocates its device buffers (throws std::runtime_error on failure).
  exl3_moe_loop(const exl3_moe_shape& s, const dev_exl3* gate, const dev_exl3* up, const dev_exl3* down,
                const int32_t* ids, const float* weights, int64_t tokens, exl3_gemm_fn gemm);
  ~exl3_moe_loop();
  exl3_moe_loop(const exl3_moe_loop&) = delete;
  exl3_moe_loop& operator=(const exl3_moe_loop&) = delete;

  // y [tokens][hidden] = the MoE MLP of x [tokens][hidden] for the routing given at construction.
  void run(const float* x, float* y, cudaStream_t stream) const;

  int64_t active_experts() const { return active_; }
  int64_t max_rows() const { return max_rows_; }

 private:
  void linear(const dev_exl3& w, const float* x, int64_t rows, float* y, cudaStream_t stream) const;

  exl3_moe_shape s_;
  int64_t tokens_ = 0, active_ = 0, max_rows_ = 0;
  std::vector<dev_exl3> gate_, up_, down_;
  std::vector<int64_t> count_, start_;  // per expert: rows and first index in the device lists
  exl3_gemm_fn gemm_;
  void* mem_ = nullptr;  // one device allocation: the lists and the scratch below
  int32_t* tok_ = nullptr;
  float* w_ = nullptr;
  float *xe_ = nullptr, *g_ = nullptr, *u_ = nullptr, *d_ = nullptr, *acc_ = nullptr;
  __half *what_ = nullptr, *xh_ = nullptr;
  void* gemv_ws_ = nullptr;
};

}  // namespace tandem::exl3::cuda
