#pragma once
// A SmolLM2-135M-shaped llama with random weights (Q4_1 linears, Q8_0 tied embedding, f32
// norms near 1): the model of bench_cuda_model and of the GPU tests that compare decode
// paths, without a model file. Deterministic (fixed seed).
//
//   tandem::test::random_weights w(tandem::test::smollm2());
//   tandem::llama_model m(be, w, tandem::test::smollm2(), pages, 16);
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <random>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "llama_hparams.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::test {

// Random blocks of the default model's tensor types and shapes.
class random_weights final : public weight_format {
 public:
  explicit random_weights(const llama_hparams& hp) {
    auto add = [&](std::string name, dtype t, std::vector<int64_t> shape) {
      int64_t n = 1;
      for (int64_t d : shape) n *= d;
      std::vector<float> f(static_cast<size_t>(n));
      for (auto& v : f) v = dist_(rng_);
      auto& bytes = store_.emplace_back();
      if (t == dtype::f32) {
        for (auto& v : f) v = 1.0f + 0.1f * v;
        bytes.resize(f.size() * 4);
        std::memcpy(bytes.data(), f.data(), bytes.size());
      } else {
        bytes.resize(static_cast<size_t>(*row_bytes(t, n)));
        if (t == dtype::q4_1) quantize_row_q4_1(f.data(), bytes.data(), n);
        else quantize_row_q8_0(f.data(), bytes.data(), n);
      }
      tensors_.push_back({std::move(name), t, std::move(shape), bytes.data(), bytes.size()});
    };
    const int64_t q = int64_t{hp.n_heads} * hp.head_dim, kv = int64_t{hp.n_kv_heads} * hp.head_dim;
    add("token_embd.weight", dtype::q8_0, {hp.vocab, hp.hidden});
    add("output_norm.weight", dtype::f32, {hp.hidden});
    for (int l = 0; l < hp.n_layers; ++l) {
      auto b = [&](const char* w) { return "blk." + std::to_string(l) + "." + w + ".weight"; };
      add(b("attn_norm"), dtype::f32, {hp.hidden});
      add(b("ffn_norm"), dtype::f32, {hp.hidden});
      add(b("attn_q"), dtype::q4_1, {q, hp.hidden});
      add(b("attn_k"), dtype::q4_1, {kv, hp.hidden});
      add(b("attn_v"), dtype::q4_1, {kv, hp.hidden});
      add(b("attn_output"), dtype::q4_1, {hp.hidden, q});
      add(b("ffn_gate"), dtype::q4_1, {hp.ffn, hp.hidden});
      add(b("ffn_up"), dtype::q4_1, {hp.ffn, hp.hidden});
      add(b("ffn_down"), dtype::q4_1, {hp.hidden, hp.ffn});
    }
  }
  void open(const std::filesystem::path&) override {}
  const model_metadata& meta() const override { return meta_; }
  std::span<const tensor_info> tensors() const override { return tensors_; }
  const tensor_info* find(std::string_view name) const override {
    for (const auto& t : tensors_) if (t.name == name) return &t;
    return nullptr;
  }
  double weight_bytes() const {
    double b = 0;
    for (const auto& t : tensors_) b += static_cast<double>(t.nbytes);
    return b;
  }

 private:
  std::mt19937 rng_{1};
  std::normal_distribution<float> dist_{0.0f, 0.05f};
  std::vector<std::vector<uint8_t>> store_;
  std::vector<tensor_info> tensors_;
  model_metadata meta_;
};

inline llama_hparams smollm2() {
  llama_hparams hp;
  hp.arch = "llama";
  hp.n_layers = 30, hp.hidden = 576, hp.ffn = 1536, hp.n_heads = 9, hp.n_kv_heads = 3, hp.head_dim = 64;
  hp.vocab = 49152, hp.context = 8192, hp.rms_eps = 1e-5f, hp.rope_theta = 100000.0f;
  return hp;
}

}  // namespace tandem::test
