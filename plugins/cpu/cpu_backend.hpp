#pragma once
// backend.cpu: the reference backend, and what serves when no GPU exists.
//
// Activations are f32 in host memory; every op runs to completion before it returns
// (synchronize() has nothing to wait for). Linear weights of q4_0 / q4_1 / q8_0 / f32 /
// f16 are used in place (bf16 is widened to f32 on load); the KV pool is f32. Ops run on
// a persistent thread pool; one thread drives a backend at a time. Every backend_op is
// implemented: beyond the dense family, layer_norm, MLA attention and the DSA indexer
// (over key-only caches; mla.hpp), and MoE routing and experts (moe.hpp). mla_attention
// and dsa_indexer leave q, kv_a and k as they were: the rotated q lives in scratch, and
// the rotated k_rope / k only in the cache.
//
//   tandem::cpu::cpu_backend be({.threads = 2});
//   auto w = be.load_linear(*wf->find("blk.0.ffn_up.weight"));
//   be.linear(*w, x, y);
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "kernels.hpp"
#include "linear.hpp"
#include "pointwise.hpp"
#include "tandem/backend.hpp"
#include "thread_pool.hpp"

namespace tandem::cpu {

struct cpu_options {
  int threads = 0;                 // 0 = every core this process may use
  int64_t memory_mb = 0;           // 0 = half of MemAvailable
  const kernel_table* kernels = nullptr;  // nullptr = best for this CPU
  // Quantized linears: false = activations quantized to q8 blocks, integer dots (fast, as
  // llama.cpp does); true = weights dequantized to f32 and float dots (exact reference).
  bool float_linear = false;
  // EXL3 linears: false = decoded to f32 at load; true = the rotated-space reference per
  // call (see exl3_linear.hpp).
  bool exl3_exact = false;
};

class cpu_backend final : public backend {
 public:
  explicit cpu_backend(const cpu_options& opt = {});

  device dev() const override { return cpu_device; }
  std::string describe() const override;
  dtype activation_type() const override { return dtype::f32; }
  size_t memory_budget() const override { return memory_budget_; }

  std::unique_ptr<device_buffer> alloc(size_t bytes) override;
  void copy_to_device(void* dst, const void* host_src, size_t bytes) override;
  void copy_to_host(void* host_dst, const void* src, size_t bytes) override;
  void synchronize() override {}

  std::unique_ptr<linear_weight> load_linear(const tensor_info& w) override;
  std::unique_ptr<device_buffer> load_tensor(const tensor_info& t, dtype as) override;
  std::unique_ptr<kv_storage> alloc_kv(const kv_layout& layout) override;

  void embed(const linear_weight& table, tensor_view ids, tensor_view out) override;
  void rms_norm(tensor_view x, tensor_view weight, float eps, tensor_view out) override;
  void add_rms_norm(tensor_view residual, tensor_view x, tensor_view weight, float eps,
                    tensor_view out) override;
  void add_rms_norm_keep(tensor_view residual, tensor_view x, tensor_view weight, float eps, tensor_view out,
                         tensor_view kept) override;
  void linear(const linear_weight& w, tensor_view x, tensor_view y) override;
  void rope(tensor_view x, tensor_view positions, const rope_params& p) override;
  void attention(tensor_view q, tensor_view k, tensor_view v, kv_storage& kv, int layer,
                 const attention_batch& batch, float scale, tensor_view out) override;
  void silu_mul(tensor_view gate, tensor_view up, tensor_view out) override;
  void add(tensor_view a, tensor_view b, tensor_view out) override;
  void gather_rows(tensor_view x, tensor_view rows, tensor_view out) override;
  void sample(tensor_view logits, std::span<const sampling_params> params,
              tensor_view ids) override;

  bool supports(backend_op op) const override;
  void layer_norm(tensor_view x, tensor_view weight, tensor_view bias, float eps, tensor_view out) override;
  std::unique_ptr<mla_weight> load_mla(const tensor_info& kv_b, int heads, int nope, int v) override;
  void mla_attention(tensor_view q, tensor_view kv_a, const mla_weight& w, kv_storage& kv, int layer,
                     const attention_batch& batch, const mla_params& p, tensor_view topk,
                     tensor_view out) override;
  void dsa_indexer(tensor_view q, tensor_view k, tensor_view w, kv_storage& kv, int layer,
                   const attention_batch& batch, int rope_dims, float rope_theta, int top_k,
                   tensor_view topk) override;
  std::unique_ptr<expert_weights> load_experts(std::span<const tensor_info* const> gate,
                                               std::span<const tensor_info* const> up,
                                               std::span<const tensor_info* const> down) override;
  void moe_route(tensor_view logits, tensor_view bias, const moe_routing& r, tensor_view ids,
                 tensor_view weights) override;
  void moe_experts(const expert_weights& w, tensor_view x, tensor_view ids, tensor_view weights,
                   tensor_view out) override;

  int threads() const { return pool_.size(); }
  const kernel_table& kernels() const { return *kernels_; }

 private:
  // add_rms_norm, and with `kept` add_rms_norm_keep (`op` names it in errors).
  void add_norm(const char* op, tensor_view residual, tensor_view x, tensor_view weight, float eps, tensor_view out,
                const tensor_view* kept);

  const kernel_table* kernels_;
  thread_pool pool_;
  size_t memory_budget_;
  linear_scratch scratch_;
  bool float_linear_;
  bool exl3_exact_;
  rope_cache rope_cache_;
  rope_cache mla_rope_cache_, dsa_rope_cache_;  // their own tables: no rebuild between ops
  std::vector<float> moe_scratch_;              // moe_experts: gathered rows and activations
  std::vector<int32_t> moe_rows_;               // moe_experts: rows by expert
  std::vector<float> moe_weights_;              // moe_experts: their routing weights
};

}  // namespace tandem::cpu
