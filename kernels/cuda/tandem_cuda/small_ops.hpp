#pragma once
// CUDA launchers of backend's small ops (tandem/backend.hpp states the contracts; their
// host defaults in core/src/base/backend_small_ops.cpp are the reference): attention_full,
// dynamic_conv and top_k. Every pointer is device memory, every tensor contiguous; the
// launchers read nothing back and allocate nothing (scratch comes from the caller, sized
// by the plans), so a recorded step replays them. The caller validates shapes.
//
//   const auto plan = tandem::cuda::plan_top_k(n, m, k);
//   tandem::cuda::top_k(plan, x, ids, values, workspace, stream);  // workspace_bytes of scratch
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

// ---- attention_full: out = softmax(scale * q.k) v over all m keys, no mask.
// q, out: [n, heads, head_dim]; k, v: [m, kv_heads, head_dim]; query head h reads kv head
// h / (heads / kv_heads). fp32 throughout (expf, fmaf), an online softmax over tiles of 32
// keys; the keys are split into `splits` ranges whose partial results (max, sum, unnormalised
// output) a second kernel merges. The split depends on m, kv_heads and the SM count only,
// never on n, so a query row's arithmetic is the same whatever the other rows are.
inline constexpr int attention_full_max_head_dim = 256;
struct attention_full_plan {
  int64_t n = 0, heads = 0, kv_heads = 0, head_dim = 0, m = 0;
  int splits = 1;              // key ranges; 1 = one kernel, normalised output written directly
  int64_t keys_per_split = 0;  // a multiple of 32
  size_t part_bytes = 0;       // scratch for the partials (0 when splits == 1)
};
// head_dim in [1, attention_full_max_head_dim], m >= 1, heads a multiple of kv_heads (the
// caller checks). sms: the device's multiprocessor count.
attention_full_plan plan_attention_full(int64_t n, int64_t heads, int64_t kv_heads, int64_t head_dim, int64_t m,
                                        int sms);
// Dynamic shared memory of the main kernel: 28.5 KiB at 64 dims, 52.5 at 128, 100.5 at 256
// (above 48 KiB the launcher opts in; the caller checks the device's per-block limit).
size_t attention_full_smem_bytes(int64_t head_dim);
// out may be q itself (each block reads its queries before it writes the same rows); it
// must not otherwise overlap q, k or v. part: plan.part_bytes of scratch.
void attention_full(const attention_full_plan& plan, const float* q, const float* k, const float* v, float scale,
                    float* out, void* part, cudaStream_t stream);

// ---- dynamic_conv: out[r][c] = (base[g][0] + taps[r][2g]) x[r][c]
//                              + (base[g][1] + taps[r][2g+1]) x[r-1][c],  x[-1] = 0,
// g = c / (d / groups). x, out: [n, d]; taps: [n, 2 groups]; base: [groups, 2]. The host
// default's roundings exactly (no contraction into fma). out must not overlap x or taps.
void dynamic_conv(const float* x, const float* taps, const float* base, int64_t n, int64_t d, int64_t groups,
                  float* out, cudaStream_t stream);

// ---- top_k: the k largest of each row of x [n, m], largest first, ties to the lower
// column, NaN ranked as -inf (values keep the NaN) and -0 equal to +0; ids: i32 [n, k],
// values: f32 [n, k] (copied from x bit for bit). Exact: every element is ranked by the
// 64-bit key (order-preserving value bits, ~column), all keys distinct, and a block radix
// select finds the k-th largest key (8-bit digits, stopping as soon as the boundary digit's
// keys are all taken). Rows longer than one segment are cut into segments of seg_len
// columns, each block keeps its segment's k best keys, and a second kernel selects among
// the segments' candidates (the row's k best are among them).
inline constexpr int top_k_max_k = 64;
inline constexpr int64_t top_k_max_cols = int64_t{1} << 20;
struct top_k_plan {
  int64_t n = 0, m = 0;
  int k = 0;
  int segments = 1;         // blocks per row; 1 = one kernel
  int64_t seg_len = 0;      // columns per segment
  size_t workspace_bytes = 0;  // candidates, n * segments * k 64-bit keys (0 when segments == 1)
};
// 1 <= k <= min(m, top_k_max_k), m <= top_k_max_cols (the caller checks).
top_k_plan plan_top_k(int64_t n, int64_t m, int k);
// ids and values must not overlap x. workspace: plan.workspace_bytes of scratch.
void top_k(const top_k_plan& plan, const float* x, int32_t* ids, float* values, void* workspace,
           cudaStream_t stream);

}  // namespace tandem::cuda
