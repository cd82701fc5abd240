// See gguf_source.hpp.
#include "gguf_source.hpp"

#include <algorithm>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::quantize {
namespace {

std::vector<float> move_rows(const std::vector<float>& w, int heads, int hd, int64_t cols, bool to_hf) {
  if (static_cast<int64_t>(w.size()) != int64_t{heads} * hd * cols || hd % 2)
    throw error("q/k permutation: shape does not match heads x head_dim");
  std::vector<float> out(w.size());
  for (int h = 0; h < heads; ++h)
    for (int j = 0; j < 2; ++j)
      for (int i = 0; i < hd / 2; ++i) {
        const int64_t hf = int64_t{h} * hd + j * (hd / 2) + i, gg = int64_t{h} * hd + 2 * i + j;
        const int64_t src = to_hf ? gg : hf, dst = to_hf ? hf : gg;
        std::copy_n(w.begin() + src * cols, cols, out.begin() + dst * cols);
      }
  return out;
}

}  // namespace

std::vector<float> unpermute_rows(const std::vector<float>& w, int heads, int hd, int64_t cols) {
  return move_rows(w, heads, hd, cols, true);
}
std::vector<float> permute_rows(const std::vector<float>& w, int heads, int hd, int64_t cols) {
  return move_rows(w, heads, hd, cols, false);
}

std::vector<float> load_f32(const weight_format& wf, const std::string& file, const std::string& name,
                            const std::vector<int64_t>& shape) {
  const tensor_info* t = wf.find(name);
  if (!t) throw model_error(file, "tensor " + name + " is missing");
  if (t->shape != shape) {
    std::string want, got;
    for (int64_t d : shape) want += (want.empty() ? "" : "x") + std::to_string(d);
    for (int64_t d : t->shape) got += (got.empty() ? "" : "x") + std::to_string(d);
    throw model_error(file, "tensor " + name + " has shape " + got + ", expected " + want);
  }
  const int64_t cols = shape.back();
  int64_t rows = 1;
  for (size_t i = 0; i + 1 < shape.size(); ++i) rows *= shape[i];
  std::vector<float> out(static_cast<size_t>(rows * cols));
  const size_t row_bytes = t->nbytes / static_cast<size_t>(rows);
  for (int64_t r = 0; r < rows; ++r)
    dequantize_row(t->type, static_cast<const uint8_t*>(t->data) + r * row_bytes, out.data() + r * cols, cols);
  return out;
}

std::vector<float> transpose(const std::vector<float>& a, int64_t r, int64_t c) {
  std::vector<float> t(a.size());
  for (int64_t i = 0; i < r; ++i)
    for (int64_t j = 0; j < c; ++j) t[j * r + i] = a[i * c + j];
  return t;
}

}  // namespace tandem::quantize
