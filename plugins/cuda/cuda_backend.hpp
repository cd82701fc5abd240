#pragma once
// backend.cuda: the llama ops on one NVIDIA GPU.
//
// Activations are f32 in device memory; the KV pool is bf16 by default. Linears read the GGML
// blocks directly when a step has few token rows (decode: activations quantized to
// 8 bits as backend.cpu's default linear does, each weight block read once for all rows:
// dp4a dots or int8 tensor-core mma up to mma_max_rows, chosen by the matrix's shape in
// path_for; or, up to 8 rows,
// f32 dots, which match backend.cpu's `linear: float` up to summation order) and run an
// f16 tensor-core GEMM
// (cuBLAS, fp32 accumulation, weights dequantized to f16 once at load) for larger steps
// (prefill). Grouped linears (q/k/v, gate/up) are one matrix and one launch; decode
// attention rotates q/k, writes the KV pool and merges its splits in one launch; the
// decode q8 GEMV applies linear_fused()'s prologue (pre-norm, SiLU gate) while it stages
// x and adds its result to the residual stream itself.
// Every op is enqueued on one stream; run_recorded() captures a step into a CUDA graph the
// first time a key is seen and replays it afterwards (graph_stats.hpp counts captures,
// replays and drops; TANDEM_CUDA_GRAPH_STATS=1 logs them at the end). CUDA failures throw
// device_error naming the op.
//
//   tandem::cuda::cuda_backend be({.device = 0});
//   auto w = be.load_linear(*wf->find("blk.0.ffn_up.weight"));
//   be.linear(*w, x, y);   // x, y: device views
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <span>
#include <map>
#include <unordered_map>

#include "device_memory.hpp"
#include "graph_stats.hpp"
#include "op_profiler.hpp"
#include "tandem/backend.hpp"
#include "tandem/logger.hpp"
#include "tandem_cuda/kernels.hpp"
#include "tandem/backend.hpp"

namespace tandem::cuda {

class cuda_linear;

struct cuda_options {
  int device = 0;
  int64_t memory_mb = 0;  // KV and workspace budget; 0 = memory_utilization of the free memory
  bool graphs = true;     // record run_recorded() bodies as CUDA graphs
  bool gemm = true;       // tensor-core GEMM for steps of more rows than the GEMV takes (else GEMV only)
  bool q8_activations = true;  // decode GEMV with activations quantized as backend.cpu's q8 (else f32;
                               // EXL3 MUL1: int8 activations per 128-block, else fp16)
  double memory_utilization = 0.9;  // share of (free memory after the weights - 1 GiB)
  // Every row's arithmetic independent of the step's shape: linears always on the GEMV
  // (no f16 GEMM, whose kernel cuBLAS picks by row count) and attention always on the
  // prefill kernel (one key order per query row), so a token's logits are bit-identical
  // whether it is decoded alone, in a batch, in a verify step or in a prompt chunk. What
  // makes speculative decoding exactly plain decoding on the GPU; slower for long prompts
  // and long contexts. Dense GQA models only (MoE, MLA and EXL3 are refused at load).
  bool batch_invariant = false;
  // Linears of more rows than the q8 GEMV is preferred for (4) and at most this many run on
  // the int8 tensor-core kernel (gemv_q8_mma: the GEMV's arithmetic, 8 rows for about the
  // price of 1) instead of the f16 GEMM; 0 = never. Not in batch_invariant mode.
  int64_t mma_max_rows = 16;
  // The kernel of a linear chosen by the matrix's shape as well as the rows (path_for:
  // the mma from 2 rows for small matrices and vocabulary heads, the GEMM from 5 for
  // matrices reading >= 1536 inputs); false: by the rows alone (GEMV to 4, mma to
  // mma_max_rows, GEMM above), as before session 14.
  bool linear_by_shape = true;
};

class cuda_backend final : public backend {
 public:
  explicit cuda_backend(const cuda_options& opt = {});
  ~cuda_backend() override;
  cuda_backend(const cuda_backend&) = delete;
  cuda_backend& operator=(const cuda_backend&) = delete;

  device dev() const override { return {device_kind::cuda, opt_.device}; }
  std::string describe() const override;
  dtype activation_type() const override { return dtype::f32; }
  size_t memory_budget() const override;
  // bf16 first: half the bytes of f32 per key (decode attention streams them), rounding
  // far below the q8 GEMVs'; fp8_e4m3 on request.
  std::vector<dtype> kv_types() const override { return {dtype::bf16, dtype::f32, dtype::fp8_e4m3}; }

  std::unique_ptr<device_buffer> alloc(size_t bytes) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void synchronize() override;

  std::unique_ptr<linear_weight> load_linear(const tensor_info& w) override;
  std::unique_ptr<device_buffer> load_tensor(const tensor_info& t, dtype as) override;
  std::unique_ptr<kv_storage> alloc_kv(const kv_layout& layout) override;
  std::unique_ptr<linear_weight> load_linear_group(std::span<const tensor_info* const> parts) override;

  void embed(const linear_weight& table, tensor_view ids, tensor_view out) override;
  void rms_norm(tensor_view x, tensor_view weight, float eps, tensor_view out) override;
  void add_rms_norm(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                    tensor_view out) override;
  // The same kernel, storing the sum to `kept` as well (no launch of its own).
  void add_rms_norm_keep(tensor_view residual, tensor_view x, tensor_view weight, float eps, tensor_view out,
                         tensor_view kept) override;
  void linear(const linear_weight& w, tensor_view x, tensor_view y) override;
  // One kernel where the q8 GEMV can stage x (gemv_q8_stageable: up to 32 rows, in <= 4096); elsewhere the
  // prologue runs on its own into scratch, and the GEMV epilogue, the GEMM (beta = 1) or an
  // add() adds the product to y.
  void linear_fused(const linear_weight& w, tensor_view x, const linear_prologue& pro, tensor_view y,
                    bool accumulate) override;
  void linear_swiglu(const linear_weight& gate_up, tensor_view x, tensor_view product, tensor_view y) override;
  // One launch where linear() would take the q8 GEMV (1-4 rows) or the int8 tensor-core
  // kernel (up to 16) for a one-segment matrix: the grid's last block runs the add_rms_norm
  // (gemv_q8_add_rms_norm: the same bits as the two ops); elsewhere the default (linear(),
  // then add_rms_norm / add_rms_norm_keep).
  void linear_add_rms_norm(const linear_weight& w, tensor_view x, tensor_view product, tensor_view residual,
                           tensor_view weight, float eps, tensor_view out, tensor_view kept) override;
  void rope(tensor_view x, tensor_view positions, const rope_params& p) override;
  void attention(tensor_view q, tensor_view k, tensor_view v, kv_storage& kv, int layer,
                 const attention_batch& batch, float scale, tensor_view out) override;
  void silu_mul(tensor_view gate, tensor_view up, tensor_view out) override;
  void add(tensor_view a, tensor_view b, tensor_view out) override;
  void gather_rows(tensor_view x, tensor_view rows, tensor_view out) override;
  void sample(tensor_view logits, std::span<const sampling_params> params,
              tensor_view ids) override;

  // supports(): the dense family (attention_full, dynamic_conv and top_k included, also when
  // batch_invariant), attention_gqa, and the ops below (MoE, MLA, DSA, layer_norm).
  // MoE (cuda_moe.cpp).
  bool supports(backend_op op) const override;
  std::unique_ptr<expert_weights> load_experts(std::span<const tensor_info* const> gate,
                                               std::span<const tensor_info* const> up,
                                               std::span<const tensor_info* const> down) override;
  void moe_route(tensor_view logits, tensor_view bias, const moe_routing& r, tensor_view ids,
                 tensor_view weights) override;
  void moe_experts(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                   tensor_view out) override;
  // The unfused baseline (bf16 / f16 / f32 experts): the routing read back and grouped on
  // the host, then per expert with tokens a gather, a cuBLAS GEMM for gate+up, silu * up, a
  // GEMM for down and a scatter-add (float atomics). Not recordable.
  void moe_experts_loop(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                        tensor_view out);
  // moe_experts' kernels for bf16 / f16 / f32 experts whatever the token count: 0 = GEMV,
  // 1 = tensor-core grouped GEMM, -1 = by token count (tandem_cuda/moe.hpp: moe_pick).
  void force_moe_kernel(int k) { moe_force_ = k; }

  // MLA, DSA indexer and layer_norm (cuda_mla.cpp): key-only caches, fp32 kernels and
  // cuBLAS fp32 GEMMs (backend.cpu's results up to summation order).
  void layer_norm(tensor_view x, tensor_view weight, tensor_view bias, float eps, tensor_view out) override;
  std::unique_ptr<mla_weight> load_mla(const tensor_info& kv_b, int heads, int nope, int v) override;
  void mla_attention(tensor_view q, tensor_view kv_a, const mla_weight& w, kv_storage& kv, int layer,
                     const attention_batch& batch, const mla_params& p, tensor_view topk, tensor_view out) override;
  void dsa_indexer(tensor_view q, tensor_view k, tensor_view w, kv_storage& kv, int layer,
                   const attention_batch& batch, int rope_dims, float rope_theta, int top_k,
                   tensor_view topk) override;

  // Small ops (cuda_small_ops.cpp; kernels in tandem_cuda/small_ops.hpp): the host defaults'
  // arithmetic on the stream, no round trip. attention_full: fp32, online softmax over key
  // ranges and a merge (backend.cpu's result up to summation order; head_dim <= 256).
  // dynamic_conv: the host default bit for bit. top_k: exact (k <= 64, rows <= 2^20).
  void attention_full(tensor_view q, tensor_view k, tensor_view v, float scale, tensor_view out) override;
  void dynamic_conv(tensor_view x, tensor_view taps, tensor_view base, tensor_view out) override;
  void top_k(tensor_view x, int k, tensor_view ids, tensor_view values) override;

  void run_recorded(uint64_t owner, uint64_t key, const std::function<void()>& body) override;

  cudaStream_t stream() const { return stream_; }
  void* native_stream() const override { return stream_; }
  size_t recorded_graphs() const { return graphs_.size(); }
  // Where the graph counts go when TANDEM_CUDA_GRAPH_STATS=1 (the host's logger; null: the
  // process-wide one).
  void log_to(logger* log) { log_ = log; }
  op_profiler& profiler() { return prof_; }

  // The kernel a linear of n rows of lw takes (cuda_ops.cpp: by the matrix's shape and n,
  // as measured); linear_fused() takes the same one, so the tests can tell which it was.
  enum class linear_path { gemv, mma, gemm };
  linear_path path_for(const cuda_linear& lw, int64_t n) const;

 private:
  int verify_on_decode() const;  // TANDEM_CUDA_DECODE_VERIFY: 0 off, 1 on, 2 the default rule (cuda_ops.cpp)
  // add_rms_norm (kept null) and add_rms_norm_keep; `op` names it in errors.
  void add_norm(const char* op, tensor_view residual, tensor_view x, tensor_view weight, float eps, tensor_view out,
                float* kept);
  bool uses_gemm() const;  // linears get the f16 copy the tensor-core GEMM reads
  void* grow(scratch& s, size_t bytes, const char* op);  // drops graphs when it reallocates
  void drop_graphs(graph_drop why);

  cuda_options opt_;
  cudaDeviceProp prop_{};
  cudaStream_t stream_ = nullptr;
  cublasHandle_t cublas_ = nullptr;
  std::unique_ptr<cuda_buffer> cublas_ws_;
  // The most token rows one GEMV launch takes on m (q8: gemv_q8_max_tokens; f32:
  // gemv_max_tokens), and the most it is given when the f16 GEMM could take them instead
  // (q8: gemv_q8_preferred_max_tokens, measured; f32: gemv_max_tokens).
  int64_t gemv_limit(const dev_matrix& m) const;
  int64_t gemv_preferred(const dev_matrix& m) const;
  void gemv_rows(const dev_matrix& m, const float* x, int64_t n, float* y, bool accumulate);
  // y (+)= x W^T for a backend.cuda weight on path_for's kernel.
  void dense_linear(const cuda_linear& lw, const float* x, int64_t n, float* y, bool accumulate);
  // The (cos, sin) table of `r` for positions [0, positions), made on the host exactly as
  // the reference's rope_angle, kept while it is large enough.
  void attach_rope_table(dev_rope& r, int head_dim, int positions);
  scratch rope_table_;
  float rope_theta_ = 0.0f;
  int rope_rot_ = 0, rope_positions_ = 0;
  scratch x16_, attn_part_, attn_tickets_, q8_, sampler_ws_, sampler_params_;
  scratch fused_x_, fused_y_;  // linear_fused's prologue output and product, where not fused
  scratch moe_ws_, moe_loop_ws_;  // moe_experts' workspace; moe_experts_loop's
  int moe_force_ = -1;
  // mla_attention's absorbed queries, row table (shared with dsa_indexer), attended latents,
  // split partials and cleaned top-k lists; dsa_indexer's rotated queries and its scores.
  scratch mla_qcat_, mla_rows_, mla_lat_, mla_part_, mla_list_, dsa_q_, dsa_ws_;
  scratch attn_full_part_, topk_ws_;  // attention_full's split partials; top_k's segment candidates
  scratch argmax_ws_;          // greedy argmax: tickets (left zero by every launch), parts
  scratch norm_ticket_;        // linear_add_rms_norm's last-block counter (left zero by every launch)
  int64_t argmax_rows_ = -1;   // the row count argmax_ws_ was last laid out for
  op_profiler prof_;
  std::map<std::pair<uint64_t, uint64_t>, cudaGraphExec_t> graphs_;  // by (owner, key)
  bool capturing_ = false;
  graph_stats graph_stats_;
  bool log_graph_stats_ = false;  // TANDEM_CUDA_GRAPH_STATS=1
  logger* log_ = nullptr;
};

}  // namespace tandem::cuda
