#pragma once
// CUDA launchers of backend.cuda's mixture-of-experts ops (tandem::backend::moe_route and
// moe_experts). Every pointer is device memory, every launch goes on `stream`, nothing reads
// back to the host: a step that calls them can be recorded into a CUDA graph (grids depend
// only on the token count and the shapes; routing-dependent sizes live on the device).
// Launch errors are left for the caller's cudaGetLastError.
//
//   moe_route(logits, E, bias, n, {256, 8, 8, 4, true, 2.5f}, ids, weights, stream);
//   void* ws = ...;   // moe_workspace_bytes(w, n, 8, moe_pick(n)) bytes, 256-byte aligned
//   moe_forward(w, x, hidden, n, ids, weights, 8, out, hidden, ws, moe_pick(n), stream);
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

// ---- Routing (moe_route.cu): tandem::moe_routing, as backend.cpu's route_row computes it.
struct dev_moe_routing {
  int n_experts = 0, top_k = 0, n_group = 1, topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};
inline constexpr int moe_route_max_top_k = 32;  // one chosen expert per lane of the token's warp
// False when one token's choice scores (n_experts + n_group floats) do not fit a block's
// shared memory.
bool moe_route_fits(int n_experts, int n_group);
// One warp per token: s = sigmoid(logit) (expf), choice = s + bias (bias may be null; NaN
// choices compare as -inf), group scores = sum of each group's two best choices (skipped
// when topk_group == n_group), the topk_group best groups, then top_k rounds of a warp
// argmax over the remaining candidates (ties to the lower index, like the CPU's sorts);
// weights = s of the chosen, summed in slot order, / (sum + 1e-20) when normalized, times
// the scale. logits rows are `ld` floats apart; ids, weights: [n, top_k] contiguous.
void moe_route(const float* logits, int64_t ld, const float* bias, int64_t n, const dev_moe_routing& r, int32_t* ids,
               float* weights, cudaStream_t stream);

// ---- Routed experts (moe_grouped*.cu).
inline constexpr int moe_max_experts = 1024;  // the grouping kernel keeps one expert per thread

// E experts as f16: gate and up of expert e in one matrix w13[e] of 2 * ffn rows x hidden,
// rows interleaved in groups of 8 (rows 16b .. 16b+7 are gate rows 8b .. 8b+7, rows 16b+8 ..
// 16b+15 the same up rows: a tensor-core n8 fragment pair holds gate and up of the same
// columns, so silu(gate) * up is done in registers); down w2[e]: hidden rows x ffn.
// hidden and ffn are multiples of 8 (16-byte rows of 8 halves).
struct dev_experts {
  const __half* w13 = nullptr;  // [E][2 ffn][hidden]
  const __half* w2 = nullptr;   // [E][hidden][ffn]
  int n_experts = 0;
  int64_t hidden = 0, ffn = 0;
};
// The w13 row of gate row j (up row j: up = true).
inline constexpr int64_t moe_w13_row(int64_t j, bool up) { return (j / 8) * 16 + (up ? 8 : 0) + j % 8; }

// Which kernels moe_forward runs after grouping the (token, slot) pairs by expert:
//  - gemv: per active expert, warps stream its weight rows once (16-byte loads) against up to
//    8 of its token rows at a time; f32 activations, f32 accumulation, f32 silu(g) * u. For
//    decode, where the weights' bytes are the cost.
//  - mma: a grouped tensor-core GEMM (mma.sync m16n8k16 f16 -> f32, 128 x 128 x 64 CTA tiles,
//    cp.async pipeline) over (expert row tile, column tile): gate+up with silu(g) * u in the
//    epilogue (stored f16), then down (f32 rows per pair). x and h are rounded to f16.
enum class moe_kernel : int { gemv = 0, mma = 1 };
inline constexpr int64_t moe_gemv_max_tokens = 8;
inline moe_kernel moe_pick(int64_t tokens) { return tokens <= moe_gemv_max_tokens ? moe_kernel::gemv : moe_kernel::mma; }

// Workspace of moe_forward for `tokens` tokens of top_k pairs each (the routing tables, the
// f16 x for mma, h [pairs][ffn] and the down rows [pairs][hidden] f32: GLM-5 shapes at 4096
// tokens top-8 ~ 1 GB).
size_t moe_workspace_bytes(const dev_experts& w, int64_t tokens, int top_k, moe_kernel k);

// out[t] = sum_j weights[t, j] * down_e(silu(gate_e x_t) * up_e x_t), e = ids[t, j], summed
// in j order (deterministic: no float atomics; each pair's down row is written once, then one
// pass per token adds them). Ids outside [0, E) contribute nothing. x, out: [tokens, hidden]
// with rows ldx / ldo floats apart (16-byte aligned rows); ids, weights: [tokens, top_k]
// contiguous. `workspace`: moe_workspace_bytes(w, tokens, top_k, k) bytes, 256-byte aligned.
void moe_forward(const dev_experts& w, const float* x, int64_t ldx, int64_t tokens, const int32_t* ids,
                 const float* weights, int top_k, float* out, int64_t ldo, void* workspace, moe_kernel k,
                 cudaStream_t stream);

// ---- Loading.
enum class moe_src : int { f32 = 0, f16 = 1, bf16 = 2 };
enum class moe_rows : int { plain = 0, gate = 1, up = 2 };  // where row j goes: j, or moe_w13_row(j, up)
// dst rows (as `mode` maps them, `cols` halves each) = f16(src [rows][cols] of type `type`),
// round to nearest; *overflow |= 1 when a finite value is beyond f16's range (it becomes inf).
void moe_convert_rows(const void* src, moe_src type, int64_t rows, int64_t cols, __half* dst, moe_rows mode,
                      unsigned* overflow, cudaStream_t stream);

// ---- The per-expert loop's pieces (backend.cuda's moe_experts_loop, the unfused baseline).
// out[i] = f16(x[rows[i]]), x rows ldx floats apart, d columns.
void moe_gather_f16(const float* x, int64_t ldx, const int32_t* rows, int64_t m, int64_t d, __half* out,
                    cudaStream_t stream);
// h [m][ffn] = f16(silu(g) * u) of g13 [m][2 ffn] (a w13 product: gate and up interleaved by 8).
void moe_silu_mul_w13(const float* g13, int64_t m, int64_t ffn, __half* h, cudaStream_t stream);
// out[rows[i]] += w[i] * d[i] (float atomics), d [m][hidden], out rows ldo floats apart.
void moe_scatter_add(const float* d, const int32_t* rows, const float* w, int64_t m, int64_t hidden, float* out,
                     int64_t ldo, cudaStream_t stream);

}  // namespace tandem::cuda
