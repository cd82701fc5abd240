#pragma once
// backend: a device and the ops a model needs, on tensors in that device's memory.
//
//   auto be = host.create<backend>("backend.cpu", cfg);
//   auto wq = be->load_linear(*weights->find("blk.0.attn_q.weight"));
//   be->linear(*wq, x, q);   // x: [n, 576] -> q: [n, 576]
//
// Activations use `activation_type()` (f32 on the CPU). Every op is asynchronous with
// respect to the host on devices that can be: call synchronize() before reading results
// copied to the host. Index tensors (ids, positions, page tables) are i32 and live in
// device memory, so a captured step can be replayed with new contents.
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/device.hpp"
#include "tandem/dtype.hpp"
#include "tandem/export.hpp"
#include "tandem/plugin_abi.hpp"
#include "tandem/sampling_params.hpp"
#include "tandem/tensor_view.hpp"

namespace tandem {

struct tensor_info;

// Memory owned by a backend; freed when destroyed.
class TANDEM_API device_buffer {
 public:
  virtual ~device_buffer();
  virtual void* data() const = 0;
  virtual size_t size() const = 0;
};

// A linear weight W of shape {out, in} prepared for this backend's kernels (y = x W^T).
class TANDEM_API linear_weight {
 public:
  virtual ~linear_weight();
  virtual int64_t in_features() const = 0;
  virtual int64_t out_features() const = 0;
  virtual dtype storage_type() const = 0;  // as stored on the device (may be quantized)
};

// Shape of one paged cache. K (and V, when `values`) of one layer are each
// [n_pages, page_size, n_kv_heads, head_dim] of `type`. GQA attention keeps K and V; the
// MLA latent cache (kv_lora_rank + rope dims, one "head") and the DSA indexer's key cache
// keep K only.
struct kv_layout {
  int n_layers = 0;
  int64_t n_pages = 0;
  int page_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
  dtype type = dtype::f32;
  bool values = true;  // false: a key-only cache

  int64_t bytes_per_token() const {  // K and V, all layers
    return (values ? 2LL : 1LL) * n_layers * n_kv_heads * head_dim * traits(type).block_bytes;
  }
};

class TANDEM_API kv_storage {
 public:
  virtual ~kv_storage();
  virtual const kv_layout& layout() const = 0;
};

// A flattened batch of sequences for attention (prefill chunks and decode tokens mixed).
// Row r of q belongs to the sequence s with query_start[s] <= r < query_start[s+1]; its
// new tokens occupy positions seq_lens[s] - n_new .. seq_lens[s] - 1 of that sequence.
struct attention_batch {
  int n_seqs = 0;
  int n_tokens = 0;
  int max_pages_per_seq = 0;
  tensor_view query_start;   // i32 [n_seqs + 1]
  tensor_view seq_lens;      // i32 [n_seqs]: context after this step (cached + new)
  tensor_view page_table;    // i32 [n_seqs, max_pages_per_seq]: pool page of each logical page
  tensor_view slot_mapping;  // i32 [n_tokens]: page * page_size + offset of each new token
  tensor_view positions;     // i32 [n_tokens]: absolute position of each new token
  // The most new tokens any one sequence has in this step (0: not known). Host-side, so a
  // backend can pick a kernel for steps of a few rows per sequence (a speculative verify)
  // without reading query_start back from the device.
  int max_query_len = 0;
  // When set, attention() first rotates q and k by `positions` (as rope() would), so a
  // backend can fuse the rotation into its KV write and decode kernel.
  const struct rope_params* rope = nullptr;
};

struct rope_params {
  float theta = 10000.0f;
  int rotary_dims = 0;   // leading dims rotated; 0 = all of head_dim
  bool neox = false;     // false: rotate adjacent pairs (GGUF llama); true: halves
};

// Linears that share one input, loaded as one weight (q/k/v, gate/up). Their outputs are
// stored one after another: y holds part 0's [n, out_0], then part 1's [n, out_1], ...
// (for n = 1 that is the concatenated row). The default keeps the parts and runs them one
// by one; a backend may fuse them into one kernel over the concatenated rows.
class TANDEM_API linear_group : public linear_weight {
 public:
  explicit linear_group(std::vector<std::unique_ptr<linear_weight>> parts);
  int64_t in_features() const override { return parts_.front()->in_features(); }
  int64_t out_features() const override { return out_; }
  dtype storage_type() const override { return parts_.front()->storage_type(); }
  const std::vector<std::unique_ptr<linear_weight>>& parts() const { return parts_; }

 private:
  std::vector<std::unique_ptr<linear_weight>> parts_;
  int64_t out_ = 0;
};

// What linear_fused() applies to x before the product.
struct linear_prologue {
  enum class kind { none, rms_norm, silu_mul };
  kind k = kind::none;
  tensor_view norm_weight;  // rms_norm: f32 [in]
  float eps = 0.0f;         // rms_norm
  tensor_view up;           // silu_mul: [n, in], the same shape as x (x is the gate)
};

// The ops a model may need, grouped by family. A backend answers supports(op) for each; a
// model lists the ops it uses, and the runtime refuses a backend that lacks one at load,
// naming it (never at the first request).
enum class backend_op : uint8_t {
  // dense: every backend implements these (they are pure virtual below)
  embed, rms_norm, linear, rope, silu_mul, add, gather_rows, sample,
  attention_gqa,   // attention(): paged causal GQA
  // norms beyond RMS
  layer_norm,
  // attention: MLA over a latent cache, and DeepSeek sparse attention's indexer
  attention_mla,   // load_mla() / mla_attention()
  dsa_indexer,     // dsa_indexer()
  // mixture of experts
  moe_route,       // moe_route(): sigmoid + correction bias + grouped top-k routing
  moe_experts,     // load_experts() / moe_experts()
  // small ops with a host default (below): every backend runs them, a device backend may
  // override them to skip the round trip through host memory
  attention_full,  // attention_full(): every query over every key, no mask, no cache
  dynamic_conv,    // dynamic_conv(): causal kernel-2 convolution with per-row taps
  top_k,           // top_k(): the k largest of each row
};
TANDEM_API std::string_view name(backend_op op);
TANDEM_API std::string_view family(backend_op op);  // "dense", "attention", "moe", "norm"

// MLA's up-projection of the latent, kv_b_proj {heads * (nope + v), rank}, split per head
// into W_UK [heads, nope, rank] and W_UV [heads, v, rank] and kept as the backend's absorbed
// form (see mla_attention). Built by load_mla().
class TANDEM_API mla_weight {
 public:
  virtual ~mla_weight();
  virtual int heads() const = 0;
  virtual int nope_dims() const = 0;   // qk_nope_head_dim
  virtual int v_dims() const = 0;      // v_head_dim
  virtual int rank() const = 0;        // kv_lora_rank
};

struct mla_params {
  int rope_dims = 0;          // qk_rope_head_dim: the last rope_dims of each q head and of
                              // the latent row are rotated (adjacent pairs) by `positions`
  float rope_theta = 10000.0f;
  float scale = 1.0f;         // softmax scale (1 / sqrt(nope + rope), times any mscale)
};

// The routed experts of one MoE layer: for expert e, gate_e and up_e {ffn, hidden} and
// down_e {hidden, ffn}. Built by load_experts().
class TANDEM_API expert_weights {
 public:
  virtual ~expert_weights();
  virtual int n_experts() const = 0;
  virtual int64_t hidden() const = 0;
  virtual int64_t ffn() const = 0;
};

// Sigmoid routing as DeepSeek-V3 / GLM-5 define it: s = sigmoid(logits); the choice score
// s + bias; experts fall in n_group groups, a group scores the sum of its two best choice
// scores, the topk_group best groups stay; the top_k best experts of those are chosen;
// their weights are s (not s + bias), divided by their sum when norm_topk_prob, then
// multiplied by routed_scaling_factor.
struct moe_routing {
  int n_experts = 0;
  int top_k = 0;
  int n_group = 1;
  int topk_group = 1;
  bool norm_topk_prob = true;
  float routed_scaling_factor = 1.0f;
};

// A name for one caller of backend::run_recorded, unique in the process and never given
// twice (a counter).
TANDEM_API uint64_t new_recording_owner();

class TANDEM_API backend : public plugin_object {
 public:
  ~backend() override;

  // True when this backend implements `op`. Default: the dense family and attention_gqa.
  virtual bool supports(backend_op op) const;

  virtual device dev() const = 0;
  virtual std::string describe() const = 0;      // one line for start-up logs
  virtual dtype activation_type() const = 0;     // dtype of activation buffers
  virtual size_t memory_budget() const = 0;      // bytes usable for KV and workspace
  // Element types attention() reads from a K-and-V cache (alloc_kv of a layout with values),
  // the preferred first: engine.kv_dtype `auto` takes it. Key-only caches (MLA, DSA) stay
  // activation_type(). Default: f32 only.
  virtual std::vector<dtype> kv_types() const { return {dtype::f32}; }

  // Memory. Copies are between host memory and a buffer of this backend.
  virtual std::unique_ptr<device_buffer> alloc(size_t bytes) = 0;
  virtual void copy_to_device(void* dst, const void* host_src, size_t bytes) = 0;
  virtual void copy_to_host(void* host_dst, const void* src, size_t bytes) = 0;
  virtual void synchronize() = 0;
  // The queue this backend's ops are enqueued on, as its native handle (backend.cuda: its
  // cudaStream_t), for a transport to order collectives with the model's kernels
  // (transport::bind_stream); null when every op completes on the host (backend.cpu).
  virtual void* native_stream() const { return nullptr; }

  // Weights. load_tensor converts a (possibly quantized) host tensor to `as`.
  virtual std::unique_ptr<linear_weight> load_linear(const tensor_info& w) = 0;
  virtual std::unique_ptr<device_buffer> load_tensor(const tensor_info& t, dtype as) = 0;
  virtual std::unique_ptr<kv_storage> alloc_kv(const kv_layout& layout) = 0;
  // Several {out_i, in} weights with the same `in`, as one linear_group-shaped weight (see
  // linear_group for the output layout). Default: a linear_group of load_linear parts,
  // which linear() runs through run_group().
  virtual std::unique_ptr<linear_weight> load_linear_group(std::span<const tensor_info* const> parts);

  // out[i] = row ids[i] of the embedding table (dequantized).  ids: [n] -> out: [n, d]
  virtual void embed(const linear_weight& table, tensor_view ids, tensor_view out) = 0;
  // out = x / rms(x) * weight, per row (out may be x).  x, out: [n, d] (rows may be strided);
  // weight: f32 [d]
  virtual void rms_norm(tensor_view x, tensor_view weight, float eps, tensor_view out) = 0;
  // residual += x; out = rms_norm(residual).  The fused pre-norm of each block.
  virtual void add_rms_norm(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                            tensor_view out) = 0;
  // add_rms_norm() that also writes the new residual to `kept`: a model keeps a layer's
  // output (a drafter's tap) without an add of its own. kept: [n, d], aliasing none of the
  // others. The default runs add() into kept, then add_rms_norm() (the same f32 sums, one op
  // more); a backend may write both from one kernel.
  virtual void add_rms_norm_keep(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                                 tensor_view out, tensor_view kept);
  // y = x W^T.  x: [n, in] -> y: [n, out]
  virtual void linear(const linear_weight& w, tensor_view x, tensor_view y) = 0;
  // y = f(x) W^T, or y += f(x) W^T when `accumulate` (the same f32 addition add() does).
  // f (pro.k): none, the identity; rms_norm, rms_norm(x, pro.norm_weight, pro.eps);
  // silu_mul, silu_mul(x, pro.up) with x the gate. x: [n, in] (with no prologue, any view
  // linear() takes), y: [n, out] (a group's layout for a linear_group); y must not alias x
  // or pro.up. Lets a backend fold a block's pre-norm, the SiLU gate and the residual add
  // into the linear's kernel. The default runs the separate ops (rms_norm / silu_mul,
  // linear, add) through a scratch buffer this object allocates once and grows when a
  // larger step needs it; a backend that records steps must override it (a grown scratch
  // would move under a recorded step).
  virtual void linear_fused(const linear_weight& w, tensor_view x, const linear_prologue& pro, tensor_view y,
                            bool accumulate);
  // SwiGLU, the gated half of a llama-style MLP: y = silu(x W_gate^T) * (x W_up^T), where
  // gate_up is a group of two equal parts [gate; up] (load_linear_group). product: [n, 2 ffn],
  // the caller's scratch, which may be written (the group's layout: every row's gate part,
  // then every row's up part); y: [n, ffn], and it may be product's gate part. The default
  // runs linear() into product, then silu_mul(); a backend may do both in one kernel.
  virtual void linear_swiglu(const linear_weight& gate_up, tensor_view x, tensor_view product, tensor_view y);
  // A block's output projection and the next pre-norm: residual += x W^T, then
  // out = rms_norm(residual, weight, eps), and kept = the new residual when kept.data is set
  // (a drafter's tap, as add_rms_norm_keep). product: [n, out], the caller's scratch, which
  // may be written. The default runs linear() into product, then add_rms_norm() (or
  // add_rms_norm_keep()); a backend may finish the norm in the linear's own launch, with the
  // same bits.
  virtual void linear_add_rms_norm(const linear_weight& w, tensor_view x, tensor_view product, tensor_view residual,
                                   tensor_view weight, float eps, tensor_view out, tensor_view kept);
  // Rotates x in place by its token's position.  x: [n, heads, head_dim]; positions: [n]
  virtual void rope(tensor_view x, tensor_view positions, const rope_params& p) = 0;
  // Writes k, v into the pool at batch.slot_mapping, then causal GQA attention of q over
  // each sequence's pages.  q, out: [n, n_heads, head_dim]; k, v: [n, n_kv_heads, head_dim]
  virtual void attention(tensor_view q, tensor_view k, tensor_view v, kv_storage& kv, int layer,
                         const attention_batch& batch, float scale, tensor_view out) = 0;
  // out = silu(gate) * up.  all: [n, d]
  virtual void silu_mul(tensor_view gate, tensor_view up, tensor_view out) = 0;
  // out = a + b.  all the same shape
  virtual void add(tensor_view a, tensor_view b, tensor_view out) = 0;
  // out[i] = x[rows[i]].  x: [n, d]; rows: i32 [m] -> out: [m, d] (x and out may be 2-D
  // views of rows strided apart)
  virtual void gather_rows(tensor_view x, tensor_view rows, tensor_view out) = 0;
  // One token per row of logits, drawn as params[i] says.  logits: f32 [m, vocab] -> ids: i32 [m]
  virtual void sample(tensor_view logits, std::span<const sampling_params> params,
                      tensor_view ids) = 0;

  // ---- Ops beyond the dense family. Each default throws tandem::error naming the backend
  // and the op; a backend that overrides one says so in supports().

  // out = (x - mean) / sqrt(var + eps) * weight + bias, per row (out may be x).  x, out:
  // [n, d]; weight, bias: f32 [d]
  virtual void layer_norm(tensor_view x, tensor_view weight, tensor_view bias, float eps, tensor_view out);

  // kv_b: the {heads * (nope + v), rank} up-projection of the latent (any dtype load_tensor
  // takes); per head its first nope rows are W_UK, the next v rows W_UV.
  virtual std::unique_ptr<mla_weight> load_mla(const tensor_info& kv_b, int heads, int nope, int v);
  // Multi-head latent attention with the up-projection absorbed. Per token:
  //   q:   [n, heads, nope + rope]  (q_nope, then q_rope, as q_b_proj writes them)
  //   kv_a: [n, rank + rope]        (the normed latent c, then k_rope, not yet rotated)
  // It rotates q_rope and k_rope by batch.positions, writes [c | k_rope] into layer `layer`
  // of `kv` (a key-only cache of one head of rank + rope dims) at batch.slot_mapping, then
  // for each head h:  q_lat = W_UK[h]^T q_nope;  s_t = scale * (q_lat . c_t + q_rope . k_rope_t)
  // over the sequence's causal context (only the positions listed in `topk` when it is
  // given: i32 [n, k], -1 = no entry); o = sum_t softmax(s)_t c_t;  out[h] = W_UV[h] o.
  // out: [n, heads, v]. batch.rope is ignored (the rotation is params' rope).
  virtual void mla_attention(tensor_view q, tensor_view kv_a, const mla_weight& w, kv_storage& kv, int layer,
                             const attention_batch& batch, const mla_params& p, tensor_view topk,
                             tensor_view out);
  // DeepSeek sparse attention's lightning indexer. Per token:
  //   q: [n, heads, d] (wq_b of the q latent), k: [n, d] (wk, layer-normed), w: f32 [n, heads]
  //   (weights_proj). Rotates the first rope_dims of each q head and of k (adjacent pairs),
  //   writes k into layer `layer` of `kv` (a key-only cache, one head of d dims) at
  //   batch.slot_mapping; scores each position t of the causal context as
  //   sum_h w[h] * heads^-1/2 * relu(d^-1/2 * q_h . k_t), and writes the positions of the
  //   top_k best, best first, to topk: i32 [n, top_k] (-1 past the context's length).
  virtual void dsa_indexer(tensor_view q, tensor_view k, tensor_view w, kv_storage& kv, int layer,
                           const attention_batch& batch, int rope_dims, float rope_theta, int top_k,
                           tensor_view topk);

  // gate[e], up[e], down[e]: expert e's {ffn, hidden}, {ffn, hidden} and {hidden, ffn}.
  virtual std::unique_ptr<expert_weights> load_experts(std::span<const tensor_info* const> gate,
                                                       std::span<const tensor_info* const> up,
                                                       std::span<const tensor_info* const> down);
  // logits: f32 [n, n_experts] (the router's x W^T); bias: f32 [n_experts] (the correction
  // bias) -> ids: i32 [n, top_k], weights: f32 [n, top_k] (see moe_routing).
  virtual void moe_route(tensor_view logits, tensor_view bias, const moe_routing& r, tensor_view ids,
                         tensor_view weights);
  // out[i] = sum_j weights[i, j] * down_e(silu(gate_e x_i) * up_e x_i), e = ids[i, j].
  // x, out: [n, hidden]; ids: i32 [n, k]; weights: f32 [n, k]
  virtual void moe_experts(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                           tensor_view out);

  // ---- Small ops with a host default: it copies the inputs to the host, computes in f32
  // and copies the result back (correct on every backend; one wait each on a device
  // backend, which may override them with kernels). Views must be contiguous.

  // Bidirectional attention: every query row attends to all m keys (no mask, no cache).
  // q, out: [n, heads, head_dim]; k, v: [m, kv_heads, head_dim]; query head h reads kv head
  // h / (heads / kv_heads); out = softmax(scale * q.k) v, in f32. m >= 1.
  virtual void attention_full(tensor_view q, tensor_view k, tensor_view v, float scale, tensor_view out);
  // Causal kernel-2 convolution with per-row taps (DFlash2's dynconv) over the n rows of x
  // taken as one sequence. With G = taps.cols / 2 groups of d / G channels, for channel c
  // of group g:  out[r][c] = (base[g][0] + taps[r][2g]) x[r][c]
  //                        + (base[g][1] + taps[r][2g+1]) x[r-1][c],  x[-1] = 0.
  // x, out: [n, d]; taps: [n, 2G]; base: f32 [G, 2]. out must not alias x.
  virtual void dynamic_conv(tensor_view x, tensor_view taps, tensor_view base, tensor_view out);
  // The k largest values of each row, largest first; ties to the lower column; NaN counts
  // as -inf (values keeps it as NaN). x: f32 [n, m] -> ids: i32 [n, k], values: f32 [n, k]; 1 <= k <= m.
  virtual void top_k(tensor_view x, int k, tensor_view ids, tensor_view values);

  // Runs `body` (a sequence of the ops above on fixed buffers). Backends that can record
  // work (CUDA graphs) may record it on the first call for (`owner`, `key`) and replay it
  // later; the body must then issue the same ops on the same buffers every time. `owner`
  // is the caller's new_recording_owner(): keys are the caller's own, so two models on one
  // backend never replay each other's steps, and a destroyed model's are never replayed for
  // a new one. Default: run it.
  virtual void run_recorded(uint64_t owner, uint64_t key, const std::function<void()>& body) {
    (void)owner;
    (void)key;
    body();
  }

 protected:
  // For linear(): when w is a linear_group, runs each part into its slice of y and
  // returns true.
  bool run_group(const linear_weight& w, tensor_view x, tensor_view y);
  // Throws tandem::error: "<describe()>: op <name> is not implemented".
  [[noreturn]] void unsupported(backend_op op) const;

 private:
  std::unique_ptr<device_buffer> fused_scratch_;  // linear_fused()'s default
};

}  // namespace tandem
