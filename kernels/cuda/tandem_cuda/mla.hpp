#pragma once
// CUDA launchers of the ops beyond the dense family that backend.cuda implements:
// layer_norm (and rms_norm over strided rows), MLA attention (absorbed form) over a
// key-only latent cache, and DeepSeek sparse attention's lightning indexer (tandem/backend.hpp states the semantics;
// plugins/cpu/mla.cpp is the reference). Every pointer is device memory; launchers read no
// device data on the host, so a recorded step replays them with new index contents.
// Invalid device indices (slots, pages) are skipped or clamped into the pool, never read
// out of bounds; the host validates shapes.
//
//   tandem::cuda::mla_prepare(...);  // rotation, cache write, row table
//   tandem::cuda::mla_attend(plan, ...);
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

// out = (x - mean) / sqrt(var + eps) * w + b per row (two-pass, as backend.cpu); out may
// be x. Rows are `*_stride` floats apart.
void layer_norm(const float* x, int64_t x_stride, const float* w, const float* b, float eps, int64_t n,
                int64_t d, float* out, int64_t out_stride, cudaStream_t stream);
// rms_norm (as tandem_cuda/kernels.hpp's) over strided rows: MLA's latent c is normalised in
// place inside kv_a's [c | k_rope] rows. out may be x.
void rms_norm_rows(const float* x, int64_t x_stride, const float* w, float eps, int64_t n, int64_t d, float* out,
                   int64_t out_stride, cudaStream_t stream);

// One layer of a key-only paged cache: [n_pages * page_size, dim] f32.
struct key_cache {
  float* k = nullptr;
  int64_t n_pages = 0;
  int page_size = 0;
  int dim = 0;
};

// The batch's device index arrays (tandem::attention_batch).
struct row_batch {
  int n_seqs = 0, n_tokens = 0, max_pages = 0;
  const int32_t* query_start = nullptr;  // [n_seqs + 1]
  const int32_t* seq_lens = nullptr;     // [n_seqs]
  const int32_t* page_table = nullptr;   // [n_seqs, max_pages]
  const int32_t* slot_mapping = nullptr; // [n_tokens]
  const int32_t* positions = nullptr;    // [n_tokens]
};

// Per query row: its sequence and the last causal key position (it sees keys 0 ..= last).
struct row_info {
  int32_t seq, last;
};

// ---- MLA

// Per row r: rinfo[r]; the cache row at slot_mapping[r] = [c | rot(k_rope)] from kv_a
// (rank + rope floats); qcat[r, h, rank ..] = rot(q_rope of head h). qcat is
// [n, heads, rank + rope]; its first rank floats per head are the absorbed q (written by
// the W_UK GEMM; zeroed here when nope == 0). Rotation: adjacent pairs, angle
// pos * theta^(-2i / rope) in double (ref::rope_angle).
void mla_prepare(const float* q, int64_t q_stride, const float* kv_a, int64_t a_stride, int heads, int nope,
                 int rope, int rank, float theta, const key_cache& kc, const row_batch& b, float* qcat,
                 row_info* rinfo, cudaStream_t stream);

// The positions a row attends to when a top-k list is given: each row's entries inside
// 0 ..= last, each once, ascending, compacted into list[r, 0 .. count[r]). k <= 16384.
void topk_sanitize(const int32_t* topk, int64_t stride, int k, int64_t n, const row_info* rinfo, int32_t* list,
                   int32_t* count, cudaStream_t stream);
inline constexpr int topk_max = 16384;

// Work split of one mla_attend: every row's keys are cut into `splits` chunks of `chunk`
// keys (one block per row, group of 8 heads and chunk); splits > 1 leaves partial results
// (part_bytes of scratch) that a merge launch combines. It depends only on the shapes, so
// a recorded step keeps it. One kernel for now: fp32 throughout (no tensor-core variant).
struct mla_plan {
  int chunk = 0, splits = 1, head_groups = 1;
  size_t part_bytes = 0;
};
mla_plan plan_mla(int64_t rows, int heads, int rank, int rope, int64_t max_keys, int n_sm);
// rank + rope floats of q (8 heads) and rank of accumulators per block must fit shared memory.
bool mla_shape_supported(int rank, int rope);

// o_lat[r, h, :] = sum_t softmax_t(scale * qcat[r, h] . key_t) key_t[0 .. rank) over row r's
// keys (0 ..= last, or list[r, 0 .. count[r]) when list is given; no keys: zeros).
// o_lat: [n, heads, rank]; part: plan.part_bytes.
void mla_attend(const mla_plan& plan, const float* qcat, int heads, int rank, int rope, const key_cache& kc,
                const row_batch& b, const row_info* rinfo, const int32_t* list, const int32_t* count,
                int64_t list_stride, float scale, void* part, float* o_lat, cudaStream_t stream);

// Decode on tensor cores (mla_decode_tc.cu): one block per (row, group of 64 heads, split
// of the row's keys), all heads of the group in the block so each latent row is read once
// per row; f16 operands (latent, q * scale, P), f32 accumulation and online softmax; the
// splits merged by a second launch. Takes rank 512 + rope 64 (any head count) where the
// device gives a block mla_tc_smem_bytes() of shared memory (H100 / H200; not GB10).
// Meant for one row per sequence (decode): each row reads its keys on its own. The latent
// tile is rounded to f16 on its way into shared memory (three stages, two barriers a tile);
// TANDEM_CUDA_MLA_TC_STAGE=f16s2 does that over two stages (three barriers), =f32 stages it
// in f32 and rounds it there (the first kernel); all give bit-identical results.
// TANDEM_CUDA_MLA_TC_PREFETCH=0 turns off the f16 stagings' L2 prefetch. Both are read at
// every call (benches and tests compare them in one process).
struct mla_tc_plan {
  int chunk = 0, splits = 1, head_groups = 1;
  size_t part_bytes = 0;
};
bool mla_tc_supported(int heads, int rank, int rope, size_t smem_per_block);
size_t mla_tc_smem_bytes();
// Splits depend on the shapes only: rows, heads, the widest row's key count (the page
// table's width, or the top-k lists' width) and the SM count. A split holds at most 2560
// keys, so beyond mla_tc_max_splits of them (contexts over 2.6M keys) mla_attend_tc does
// not take the step.
mla_tc_plan plan_mla_tc(int64_t rows, int heads, int64_t max_keys, int n_sm);
inline constexpr int mla_tc_max_splits = 1024;
// mla_attend's contract (o_lat [n, heads, 512]; no keys: zeros). early: kernels two launches
// back wrote rinfo, the cache rows and the lists (one kernel, the W_UK GEMM, sits between),
// so the block may read them before waiting for its predecessor.
void mla_attend_tc(const mla_tc_plan& plan, const float* qcat, int heads, const key_cache& kc, const row_batch& b,
                   const row_info* rinfo, const int32_t* list, const int32_t* count, int64_t list_stride,
                   float scale, bool early, void* part, float* o_lat, cudaStream_t stream);

// ---- DSA indexer

// Per row r: rinfo[r]; rotates the first rope dims of k (adjacent pairs) into the cache
// at slot_mapping[r]; qrot[r] = q with every head's first rope dims rotated; wsc[r, h] =
// w[r, h] * (1 / sqrt(heads)) in f32, as backend.cpu rounds it.
void dsa_prepare(const float* q, int64_t q_stride, const float* k, int64_t k_stride, const float* w,
                 int64_t w_stride, int heads, int d, int rope, float theta, const key_cache& kc, const row_batch& b,
                 float* qrot, float* wsc, row_info* rinfo, cudaStream_t stream);

// The work of one dsa_select: rows go in batches of rows_per_batch, whose scores
// ([rows_per_batch, max_keys] f32) fill the workspace; max_keys bounds every row's context
// (the page table's width). It depends only on the shapes.
struct dsa_plan {
  int64_t rows = 0, rows_per_batch = 0, max_keys = 0;
  int heads = 0, d = 0, top_k = 0;
  size_t workspace_bytes = 0;
};
// d % 4 == 0, 0 < d <= 128, heads * d <= 16384 (the query row is staged in shared memory).
bool dsa_shape_supported(int heads, int d);
inline constexpr int dsa_topk_max = 8192;  // the selected keys are sorted in shared memory
dsa_plan plan_dsa(int64_t rows, int heads, int d, int top_k, int64_t max_keys);

// For each row: score_t = sum_h wsc[h] * relu(qrot_h . k_t / sqrt(d)) over keys 0 ..= last
// (NaN scores count as -inf), then topk[r, 0 .. top_k) = the best positions, descending,
// ties to the lower position, -1 past the context. Per batch of rows: one scoring launch
// (a block per row and 256 keys), then one block per row selects: a radix select over the
// scores' order-preserving bits finds the top_k-th best value, the keys above it and the
// first keys equal to it (in position order) are gathered, and a bitonic sort orders them.
void dsa_select(const dsa_plan& plan, const float* qrot, const float* wsc, const key_cache& kc,
                const row_batch& b, const row_info* rinfo, int32_t* topk, int64_t topk_stride, void* workspace,
                cudaStream_t stream);

}  // namespace tandem::cuda
