#pragma once
// The calibration activations of the quantizer: token rows embedded, then carried through
// each layer (with the already-quantized weights) by a plain f32 llama forward on the CPU
// (tandem_ref ops, half-split RoPE on HF-ordered q/k, causal attention per row).
#include <filesystem>
#include <vector>

#include "llama_hparams.hpp"
#include "tandem/tokenizer.hpp"
#include "tandem_exl3/ldlq.hpp"

namespace tandem::quantize {

class calibration_state {
 public:
  // Tokenizes `text_file` and cuts it into up to `rows` rows of `cols` tokens (one shorter
  // row if the text has fewer than `cols` tokens). An empty path = no calibration.
  // Throws tandem::error if the file cannot be read or yields fewer than 2 tokens.
  static calibration_state from_text(const std::filesystem::path& text_file, const tokenizer& tok,
                                     const std::vector<float>& embd, int d, int rows, int cols);

  int64_t tokens() const { return n_rows_ * row_len_; }
  bool empty() const { return tokens() == 0; }

  std::vector<float> normed(const std::vector<float>& w, float eps) const;  // rms_norm(x)
  // H = XᵀX / rows over the finite rows of a [tokens][k], prepared (fallback when empty).
  exl3::prepared_hessian hessian(const std::vector<float>& a, int k, uint64_t seed) const;
  // Causal attention output [tokens][n_heads*head_dim] for weights [d][out] (HF order).
  std::vector<float> attention(const std::vector<float>& xn, const std::vector<float>& wq,
                               const std::vector<float>& wk, const std::vector<float>& wv,
                               const llama_hparams& hp, int threads) const;
  // silu(xn·wg) * (xn·wu).
  std::vector<float> mlp_act(const std::vector<float>& xn, const std::vector<float>& wg,
                             const std::vector<float>& wu, int d, int ffn, int threads) const;
  // The residual: x += a·w (a: [tokens][k], w: [k][n]).
  void add_linear(const std::vector<float>& a, int k, const std::vector<float>& w, int n, int threads);

  void save(const std::filesystem::path& p) const;
  void load(const std::filesystem::path& p);

 private:
  int64_t n_rows_ = 0, row_len_ = 0;
  int d_ = 0;
  std::vector<float> x_;  // [tokens][d]
};

// y[T][n] = x[T][k] · w[k][n], rows split over threads.
void matmul(const float* x, int64_t T, int k, const float* w, int n, float* y, int threads);

}  // namespace tandem::quantize
