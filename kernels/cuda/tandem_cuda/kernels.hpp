#pragma once
// CUDA launchers of the llama ops: the kernels/ref operations on device buffers, enqueued
// on `stream`. Shapes and semantics are those of tandem_ref/ops.hpp and attention.hpp;
// every pointer is device memory. Launchers check nothing that needs a device read (index
// tensors are device data): out-of-range ids, slots or pages are skipped or give NaN, and
// the caller validates what it can on the host. Launch errors are left for the caller's
// cudaGetLastError (the backend turns them into tandem::device_error naming the op).
//
//   tandem::cuda::rms_norm(x, w, 1e-5f, n, 576, out, stream);
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>

namespace tandem::cuda {

// A linear weight {out, in} on the device, repacked from GGML blocks so that one thread
// reads a block's quants with one 16- or 32-byte load: quants of all blocks first, then the
// per-block scales. f32 weights are plain rows.
enum class wformat : int { q4_1, q8_0, f32 };
//
// A grouped linear (q/k/v, gate/up) is one matrix whose rows are cut into n_segs segments
// [seg[i], seg[i+1]); its output is segment-major: all n tokens of segment 0, then of
// segment 1, ... (tandem::linear_group's layout). One segment = the plain [n, out] layout.
struct dev_matrix {
  wformat format = wformat::f32;
  const void* qs = nullptr;      // q4_1: u8 [out, in/32, 16]; q8_0: i8 [out, in/32, 32]; f32: [out, in]
  const void* scales = nullptr;  // q4_1: half2 (d, m) [out, in/32]; q8_0: half d [out, in/32]
  int64_t out = 0, in = 0;
  int n_segs = 1;
  int64_t seg[5] = {0, 0, 0, 0, 0};  // seg[0] = 0, seg[n_segs] = out
};
// Rows [seg[i], seg[i+1]) of m as a plain matrix (host-side pointer arithmetic).
dev_matrix segment_of(const dev_matrix& m, int i);

// y[n, out] = x[n, in] W^T, reading the quantized blocks (n <= gemv_max_tokens).
inline constexpr int64_t gemv_max_tokens = 8;
void gemv(const dev_matrix& w, const float* x, int64_t n, float* y, cudaStream_t stream);
// The same with 8-bit activations quantized as backend.cpu's quantize_q8 and dp4a dots
// (q4_1 and q8_0 weights), for up to gemv_q8_max_tokens rows: each weight block is read
// once and dotted with every row's block. x is quantized either by every block into its
// shared memory (q8_staging::in_block: no extra launch; in <= 4096 and the rows' bytes
// within the block's budget, gemv_q8_stageable) or once into `scratch` by a quantize
// kernel first (q8_staging::global; scratch has gemv_q8_scratch_bytes(n, in) bytes).
// automatic: in_block for one row of a matrix under 16384 rows, global otherwise (on the
// H200 the global path was as fast or faster from 2 rows on, and 35% faster for the
// 49152-row LM head at 1 row: bench_cuda_kernels' linear curve, 2026-12-04).
//
// The kernel's cost grows by ~0.7 us a row at the default model's shapes (each lane runs
// every row's dot products in turn, and in = 576 keeps 18 of 32 lanes busy), so the f16
// GEMM over the dequantized copy (4.4-5.9 us for 8 to 128 rows, conversion included) is
// faster from 8 rows on: backend.cuda takes the GEMV up to gemv_q8_preferred_max_tokens
// rows where it has the copy, and up to gemv_q8_max_tokens rows a launch where it has not.
inline constexpr int64_t gemv_q8_max_tokens = 32;
inline constexpr int64_t gemv_q8_preferred_max_tokens = 4;
enum class q8_staging : int { automatic, in_block, global };
bool gemv_q8_supported(const dev_matrix& w);
bool gemv_q8_stageable(const dev_matrix& w, int64_t n);
size_t gemv_q8_scratch_bytes(int64_t n, int64_t in);
void gemv_q8(const dev_matrix& w, const float* x, int64_t n, float* y, void* scratch, cudaStream_t stream);
// x [n, in] quantized to q8 blocks (backend.cpu's quantize_q8): xq [n, in] int8 and ds
// [n, in / 32] (d, d * sum q), as gemv_q8's global staging writes them (in % 32 == 0).
void quantize_q8_rows(const float* x, int64_t n, int64_t in, int8_t* xq, float2* ds, cudaStream_t stream);
// What a fused linear applies to x first (tandem::linear_prologue): nothing; x / rms(x) *
// norm_weight [in] (rms_norm's arithmetic, bit for bit); or silu(x) * up [n, in]
// (silu_mul's, x the gate).
struct dev_prologue {
  enum kind_t : int { none = 0, rms_norm = 1, silu_mul = 2 };
  kind_t kind = none;
  const float* norm_weight = nullptr;
  float eps = 0.0f;
  const float* up = nullptr;
};
// gemv_q8 with the prologue applied while x is staged per block (only where
// gemv_q8_stageable(w, n); any other call takes no prologue), and with
// `accumulate` y += the result (each output read and written by one thread). y must not
// alias x or up. An impossible `staging` (in_block where x is not stageable, global with a
// prologue) throws std::invalid_argument.
void gemv_q8_fused(const dev_matrix& w, const float* x, int64_t n, const dev_prologue& pro, bool accumulate, float* y,
                   void* scratch, cudaStream_t stream, q8_staging staging = q8_staging::automatic);
// The q8 GEMV's arithmetic on int8 tensor cores (gemv_q8_mma.cu): one mma.m16n8k32 per
// weight block, 16 output rows and 8 tokens, its exact integer dots scaled as the GEMV
// scales them; y = (or += when accumulate) pro(x) W^T, segment-major for groups. 8 rows
// cost about what 1 does. x is quantized in every block's shared memory with the prologue
// applied (q8_staging::in_block, where gemv_q8_mma_stageable: at most 32 rows, in <= 4096)
// or once into `scratch` (gemv_q8_scratch_bytes(n, in)) by quantize_q8_rows (global; no
// prologue); automatic takes in_block for a prologue, and for up to 8 rows of a matrix under
// 2048 rows (where re-quantizing x in every block costs less than a launch). A (row, token) output sums its blocks
// in an order fixed by the matrix's shape alone, and both stagings give the same bytes, so
// it does not depend on the launch's other rows; it is not the GEMV's order (the results
// agree to float rounding, not bit for bit). Impossible requests throw std::invalid_argument.
inline constexpr int64_t gemv_q8_mma_max_tokens = 64;
bool gemv_q8_mma_stageable(const dev_matrix& w, int64_t n);
void gemv_q8_mma(const dev_matrix& w, const float* x, int64_t n, const dev_prologue& pro, bool accumulate, float* y,
                 void* scratch, cudaStream_t stream, q8_staging staging = q8_staging::automatic);
// SwiGLU: for w a [gate; up] group of two equal parts (swiglu_shaped), y [n, out / 2] =
// silu(x W_gate^T) * (x W_up^T), one launch; the same bits as the plain kernel's product
// followed by silu_mul (each output's gate and up rows are summed as the plain kernel sums
// them). gemv_q8_swiglu: up to gemv_q8_max_tokens rows (x staged as gemv_q8's automatic
// choice; scratch as gemv_q8's). gemv_q8_mma_swiglu: up to gemv_q8_mma_max_tokens rows.
bool swiglu_shaped(const dev_matrix& w);
void gemv_q8_swiglu(const dev_matrix& w, const float* x, int64_t n, float* y, void* scratch, cudaStream_t stream);
void gemv_q8_mma_swiglu(const dev_matrix& w, const float* x, int64_t n, float* y, void* scratch, cudaStream_t stream);
// A block's output projection and the next pre-norm in one launch (backend::
// linear_add_rms_norm): y [n, out] = x W^T as gemv_q8 writes it, then the grid's last block
// to finish (a ticket counter) runs add_rms_norm over every row: residual += y, out =
// rms_norm(residual, weight, eps), kept = residual when kept is set, with rms_norm_kernel's
// arithmetic, so the result is gemv_q8 then add_rms_norm bit for bit. For q4_1 / q8_0
// matrices of one segment and 1 to gemv_q8_norm_max_tokens rows
// (gemv_q8_add_rms_norm_supported); x is staged as gemv_q8's automatic choice (scratch as
// gemv_q8's). `ticket` is one counter in device memory, zero before the first launch; every
// launch leaves it zero (graph-capturable). y must not alias x, residual, out or kept.
inline constexpr int64_t gemv_q8_norm_max_tokens = 4;
struct dev_add_norm {
  float* residual = nullptr;       // [n, out]
  const float* weight = nullptr;   // [out]; read after the kernel's wait, like the other inputs
  float eps = 0.0f;
  float* out = nullptr;            // [n, out]
  float* kept = nullptr;           // [n, out] or null
  unsigned int* ticket = nullptr;
};
bool gemv_q8_add_rms_norm_supported(const dev_matrix& w, int64_t n);
void gemv_q8_add_rms_norm(const dev_matrix& w, const float* x, int64_t n, float* y, const dev_add_norm& norm,
                          void* scratch, cudaStream_t stream);
// The same on the int8 tensor-core kernel (gemv_q8_mma's product, staged as its automatic
// choice), for 1 to gemv_q8_mma_norm_max_tokens rows: gemv_q8_mma then add_rms_norm bit for bit.
inline constexpr int64_t gemv_q8_mma_norm_max_tokens = 16;
bool gemv_q8_mma_add_rms_norm_supported(const dev_matrix& w, int64_t n);
void gemv_q8_mma_add_rms_norm(const dev_matrix& w, const float* x, int64_t n, float* y, const dev_add_norm& norm,
                              void* scratch, cudaStream_t stream);
// gemv with `accumulate`: y += x W^T (the add rounds as add() does).
void gemv(const dev_matrix& w, const float* x, int64_t n, float* y, bool accumulate, cudaStream_t stream);
// W as f16 [out, in], for the tensor-core GEMM of prefill (dequantized as the reference does).
void dequantize_f16(const dev_matrix& w, __half* out, cudaStream_t stream);
// out[i, :] = row ids[i] of the table; an id outside [0, out) gives a NaN row.
void embed(const dev_matrix& table, const int32_t* ids, int64_t n, float* out, cudaStream_t stream);
void f32_to_f16(const float* x, int64_t count, __half* out, cudaStream_t stream);

// w is read before the kernel waits for its predecessor (programmatic dependent launch):
// it must be a parameter, not written by the kernels just before.
void rms_norm(const float* x, const float* w, float eps, int64_t n, int64_t d, float* out,
              cudaStream_t stream);
// residual += x; out = rms_norm(residual); kept = residual when not null (the same kernel).
void add_rms_norm(float* residual, const float* x, const float* w, float eps, int64_t n, int64_t d,
                  float* out, float* kept, cudaStream_t stream);
// x: [n, heads, head_dim] rotated in place; angles in double as ref::rope_angle.
void rope(float* x, int64_t n, int64_t heads, int64_t head_dim, const int32_t* positions,
          float theta, int rotary_dims, bool neox, cudaStream_t stream);
void silu_mul(const float* gate, const float* up, int64_t count, float* out, cudaStream_t stream);
void add(const float* a, const float* b, int64_t count, float* out, cudaStream_t stream);
// out row i = x row rows[i] (NaN for a row outside [0, n)); rows of x and out are x_stride
// and out_stride floats apart (d for packed rows).
void gather_rows(const float* x, int64_t n, int64_t d, int64_t x_stride, const int32_t* rows, int64_t m, float* out,
                 int64_t out_stride, cudaStream_t stream);

// Paged attention (tandem_ref/attention.hpp): one layer of the pool. Its elements are f32,
// bf16 or fp8 e4m3 (tandem::dtype's names); the kernels take the new k and v as f32, round
// them to the pool's type as they store them (nearest even; fp8 saturates at +-448 with a
// scale of 1.0, as vLLM and llama.cpp without calibrated scales), and compute in f32 from
// the stored values, so a key is read back exactly as it was rounded.
enum class kv_elem : int { f32, bf16, fp8_e4m3 };
int kv_elem_bytes(kv_elem e);
struct dev_kv {
  void* k = nullptr;  // [n_pages * page_size, n_kv_heads, head_dim] of `type`
  void* v = nullptr;
  int64_t n_pages = 0;
  int page_size = 0, n_kv_heads = 0, head_dim = 0;
  kv_elem type = kv_elem::f32;
};
struct dev_batch {
  int n_seqs = 0, n_tokens = 0, max_pages = 0;
  const int32_t* query_start = nullptr;
  const int32_t* seq_lens = nullptr;
  const int32_t* page_table = nullptr;  // [n_seqs, max_pages]
  const int32_t* slot_mapping = nullptr;
};
bool attention_head_dim_supported(int head_dim);  // 64 and 128
void kv_write(const float* k, const float* v, const dev_batch& b, const dev_kv& kv,
              cudaStream_t stream);
// Any batch: flash-style tiles of query rows, online softmax over key tiles.
void attention_prefill(const float* q, int n_heads, const dev_kv& kv, const dev_batch& b,
                       float scale, float* out, cudaStream_t stream);
// The same on tensor cores (attention_prefill_tc.cu): FlashAttention-2 style, Q, K, V and P
// rounded to f16, f32 accumulation (relative error ~1e-3 against the f32 reference; bf16
// and fp8 K/V convert to f16 exactly, so they add only their own storage rounding). Head
// dims 64 and 128; any other falls back to attention_prefill.
void attention_prefill_tc(const float* q, int n_heads, const dev_kv& kv, const dev_batch& b,
                          float scale, float* out, cudaStream_t stream);
// RoPE as tandem::rope_params, for kernels that rotate inside (on = false: no rotation).
struct dev_rope {
  bool on = false;
  float theta = 10000.0f;
  int rotary_dims = 0;
  bool neox = false;
  // Optional (cos, sin) per [position, pair], as ref::rope_angle computes them on the host;
  // positions past table_positions are computed on the device (double, as the reference).
  const float2* table = nullptr;
  int table_positions = 0;
};
// Decode (one new token per sequence, row s = sequence s) and speculative verify steps (up
// to decode_max_rows() new tokens per sequence, at the positions attention_batch gives
// them): rotates q and the new k when rope.on, writes the new k and v into the pool, and
// attends each row over its own causal prefix of its sequence's keys split in chunks over
// the grid; the last block of each (row, KV head) merges the splits. The plan depends only
// on the batch shape (sequences, rows) and page-table width, so a recorded step keeps its
// grid; scratch and tickets come from it (tickets zeroed once, and left zeroed by every
// launch).
struct decode_plan {
  int chunk = 0, splits = 0;
  int rows_per_seq = 1;  // the most new tokens a sequence can have (shared memory holds them)
  size_t scratch_bytes = 0, ticket_bytes = 0;
  // Shared-memory ring depth per warp: 2 (measured best for every element type);
  // TANDEM_CUDA_DECODE_STAGES=2..decode_max_stages(type) sets it.
  int stages = 2;
};
int decode_max_stages(kv_elem type);  // 4 for f32, 8 for bf16 and fp8
int decode_max_rows();                 // new tokens of one sequence the decode kernel takes (16)
// n_rows: the step's token rows (0: one per sequence).
decode_plan plan_decode(int n_seqs, int n_kv_heads, int max_pages, int page_size, int head_dim, int n_heads,
                        kv_elem type, int n_rows = 0);
void attention_decode(const float* q, const float* k, const float* v, int n_heads, const dev_kv& kv,
                      const dev_batch& b, const dev_rope& rope, float scale, float* out,
                      const decode_plan& plan, void* scratch, int* tickets, cudaStream_t stream);

// Sampling. Greedy: argmax, ties to the lowest id, NaN skipped; -1 for a row with no
// finite logit.
void argmax_rows(const float* logits, int64_t m, int vocab, int32_t* ids, cudaStream_t stream);
// The same over several blocks per row (the last block of a row to finish, by a ticket
// counter, merges the blocks' results): `ws` has argmax_workspace_bytes(m, vocab) bytes,
// zeroed before its first use; every launch leaves it fit for the next (graph-capturable).
size_t argmax_workspace_bytes(int64_t m, int vocab);
void argmax_rows(const float* logits, int64_t m, int vocab, int32_t* ids, void* ws, cudaStream_t stream);
// What one row of the sampler needs (sampling_params flattened).
struct dev_sampling {
  float temperature, top_p, min_p;
  int32_t top_k;
  uint64_t seed, step;
  int32_t greedy;
};
size_t sampler_workspace_bytes(int64_t m, int vocab);
// Overwrites ids of the non-greedy rows with tandem_ref/sampling.hpp's draw. `params` is
// device memory [m]; `ws` has sampler_workspace_bytes(m, vocab) bytes.
void sample_rows(const float* logits, int64_t m, int vocab, const dev_sampling* params, void* ws,
                 int32_t* ids, cudaStream_t stream);

}  // namespace tandem::cuda
