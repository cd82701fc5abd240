#pragma once
// A glm_moe_dsa model with random bf16 weights, made in memory from a config.json text: the
// tensors under the names of GLM-5's checkpoints (per-expert experts), so benches run the
// real model code at real head shapes without a checkpoint.
#include <cmath>
#include <cstring>
#include <span>
#include <cstdint>
#include <deque>
#include <string>
#include <unordered_map>
#include <vector>

#include "glm_moe_dsa/glm_config.hpp"
#include "tandem/weight_format.hpp"

namespace tandem::bench {

class random_glm final : public weight_format {
 public:
  explicit random_glm(const std::string& config_json) : cfg_(glm::glm_config::parse(config_json, "bench config")) {
    meta_.set("general.architecture", std::string("glm_moe_dsa"));
    meta_.set("hf.config_json", config_json);
    const glm::glm_config& c = cfg_;
    const int64_t H = c.hidden, heads = c.n_heads;
    add("model.embed_tokens.weight", {c.vocab, H}, 0.05f);
    add("lm_head.weight", {c.vocab, H}, 0.05f);
    norm("model.norm.weight", H);
    for (int l = 0; l < c.n_layers; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".", a = p + "self_attn.";
      norm(p + "input_layernorm.weight", H);
      norm(p + "post_attention_layernorm.weight", H);
      add(a + "q_a_proj.weight", {c.q_lora_rank, H}, 0.02f);
      norm(a + "q_a_layernorm.weight", c.q_lora_rank);
      add(a + "q_b_proj.weight", {heads * c.qk_head_dims(), c.q_lora_rank}, 0.02f);
      add(a + "kv_a_proj_with_mqa.weight", {c.kv_lora_rank + c.qk_rope, H}, 0.02f);
      norm(a + "kv_a_layernorm.weight", c.kv_lora_rank);
      add(a + "kv_b_proj.weight", {heads * (c.qk_nope + c.v_dims), c.kv_lora_rank}, 0.02f);
      add(a + "o_proj.weight", {H, heads * c.v_dims}, 0.02f);
      if (c.own_indexer[l]) {
        const std::string ix = a + "indexer.";
        add(ix + "wq_b.weight", {int64_t(c.index_heads) * c.index_dims, c.q_lora_rank}, 0.02f);
        add(ix + "wk.weight", {c.index_dims, H}, 0.02f);
        norm(ix + "k_norm.weight", c.index_dims);
        add(ix + "k_norm.bias", {c.index_dims}, 0.01f);
        add(ix + "weights_proj.weight", {c.index_heads, H}, 0.02f);
      }
      const std::string m = p + "mlp.";
      if (!c.sparse_mlp[l]) {
        add(m + "gate_proj.weight", {c.ffn, H}, 0.02f);
        add(m + "up_proj.weight", {c.ffn, H}, 0.02f);
        add(m + "down_proj.weight", {H, c.ffn}, 0.02f);
        continue;
      }
      add(m + "gate.weight", {c.n_routed, H}, 0.02f, dtype::f32);
      add(m + "gate.e_score_correction_bias", {c.n_routed}, 0.02f, dtype::f32);
      const int64_t S = c.moe_ffn * c.n_shared;
      add(m + "shared_experts.gate_proj.weight", {S, H}, 0.02f);
      add(m + "shared_experts.up_proj.weight", {S, H}, 0.02f);
      add(m + "shared_experts.down_proj.weight", {H, S}, 0.02f);
      for (int e = 0; e < c.n_routed; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        add(x + "gate_proj.weight", {c.moe_ffn, H}, 0.02f);
        add(x + "up_proj.weight", {c.moe_ffn, H}, 0.02f);
        add(x + "down_proj.weight", {H, c.moe_ffn}, 0.02f);
      }
    }
    for (const tensor_info& t : list_) index_[t.name] = &t;
  }
  const glm::glm_config& config() const { return cfg_; }
  void open(const std::filesystem::path&) override {}
  const model_metadata& meta() const override { return meta_; }
  std::span<const tensor_info> tensors() const override { return {flat()}; }
  const tensor_info* find(std::string_view name) const override {
    auto it = index_.find(std::string(name));
    return it == index_.end() ? nullptr : it->second;
  }

 private:
  std::span<const tensor_info> flat() const {
    if (flat_.size() != list_.size()) flat_.assign(list_.begin(), list_.end());
    return flat_;
  }
  uint32_t next() {  // xorshift32: fast, deterministic
    rng_ ^= rng_ << 13;
    rng_ ^= rng_ >> 17;
    rng_ ^= rng_ << 5;
    return rng_;
  }
  void add(const std::string& name, std::vector<int64_t> shape, float scale, dtype type = dtype::bf16, float base = 0) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    tensor_info t;
    t.name = name;
    t.type = type;
    t.shape = std::move(shape);
    if (type == dtype::f32) {
      f32_.emplace_back(n);
      for (float& v : f32_.back()) v = base + scale * (static_cast<float>(next() >> 8) * (2.0f / 16777216.0f) - 1.0f);
      t.data = f32_.back().data();
      t.nbytes = static_cast<size_t>(n) * 4;
    } else {
      bf16_.emplace_back(n);
      for (uint16_t& v : bf16_.back()) {
        float f = base + scale * (static_cast<float>(next() >> 8) * (2.0f / 16777216.0f) - 1.0f);
        uint32_t bits;
        std::memcpy(&bits, &f, 4);
        v = static_cast<uint16_t>(bits >> 16);
      }
      t.data = bf16_.back().data();
      t.nbytes = static_cast<size_t>(n) * 2;
    }
    list_.push_back(std::move(t));
  }
  void norm(const std::string& name, int64_t n) { add(name, {n}, 0.1f, dtype::bf16, 1.0f); }

  glm::glm_config cfg_;
  model_metadata meta_;
  std::deque<tensor_info> list_;
  std::unordered_map<std::string, const tensor_info*> index_;
  mutable std::vector<tensor_info> flat_;
  std::deque<std::vector<uint16_t>> bf16_;
  std::deque<std::vector<float>> f32_;
  uint32_t rng_ = 0x9e3779b9u;
};

}  // namespace tandem::bench
