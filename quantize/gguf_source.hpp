#pragma once
// Reading a llama GGUF as Hugging Face-ordered f32 matrices for the quantizer.
//
// GGUF stores q_proj/k_proj rows permuted for llama.cpp's adjacent-pair RoPE (the
// converter's `permute`: within each head, HF row j*(d/2)+i becomes GGUF row 2i+j).
// unpermute_rows undoes it, so quantized tensors carry HF names and HF row order, and the
// calibration forward uses half-split (NeoX-style) RoPE as HF's llama does.
#include <cstdint>
#include <string>
#include <vector>

#include "tandem/weight_format.hpp"

namespace tandem::quantize {

// rows: [heads * head_dim][cols] in GGUF order -> HF order (new buffer).
std::vector<float> unpermute_rows(const std::vector<float>& w, int heads, int head_dim, int64_t cols);
// The inverse (HF -> GGUF), used by the tests.
std::vector<float> permute_rows(const std::vector<float>& w, int heads, int head_dim, int64_t cols);

// Tensor `name` dequantized to f32, row-major as stored ({out, in} for a linear: [out][in]).
// Throws model_error if it is missing or its shape is not `shape`.
std::vector<float> load_f32(const weight_format& wf, const std::string& file, const std::string& name,
                            const std::vector<int64_t>& shape);

// [r][c] -> [c][r].
std::vector<float> transpose(const std::vector<float>& a, int64_t r, int64_t c);

}  // namespace tandem::quantize
