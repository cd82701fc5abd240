#pragma once
// What backend.cuda keeps for a linear weight and for the KV pool.
#include <cuda_fp16.h>

#include <memory>
#include <span>
#include <vector>

#include "device_memory.hpp"
#include "tandem/backend.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_cuda/kernels.hpp"

namespace tandem::cuda {

// A weight {out, in}: the quantized blocks repacked for 16-byte loads (decode GEMV and
// embedding), plus an f16 copy dequantized once at load for the prefill GEMM (absent when
// the backend runs without GEMM).
class cuda_linear final : public linear_weight {
 public:
  // Uploads `t` (q4_1, q8_0 as they are; f32, f16, bf16 as f32). tandem::error for other
  // types, non-2-D shapes or rows that are not whole 32-element blocks.
  cuda_linear(const tensor_info& t, bool with_f16, cudaStream_t stream);
  // Parts {out_i, in} of one type, rows concatenated: a grouped linear whose output is
  // segment-major (dev_matrix). tandem::error when types or widths differ.
  cuda_linear(std::span<const tensor_info* const> parts, bool with_f16, cudaStream_t stream);

  int64_t in_features() const override { return m_.in; }
  int64_t out_features() const override { return m_.out; }
  dtype storage_type() const override { return type_; }

  const dev_matrix& matrix() const { return m_; }
  const __half* f16() const { return f16_ ? static_cast<const __half*>(f16_->data()) : nullptr; }

 private:
  void upload_weight(const tensor_info& t, bool with_f16, cudaStream_t stream);

  dtype type_;
  dev_matrix m_;
  std::unique_ptr<cuda_buffer> qs_, scales_, f16_;
};

// K and V of every layer, [n_pages, page_size, n_kv_heads, head_dim] each of f32, bf16 or
// fp8_e4m3; K only, f32, for a key-only layout (values = false: the MLA latent cache, the
// DSA indexer's keys).
class cuda_kv final : public kv_storage {
 public:
  explicit cuda_kv(const kv_layout& layout);
  const kv_layout& layout() const override { return layout_; }
  // K and V of layer l, for attention(); tandem::error for a bad layer or a key-only cache.
  dev_kv layer(int l) const;
  // K of layer l of a key-only cache; tandem::error naming `op` for a bad layer or a cache
  // that also holds values.
  float* keys(int l, const char* op) const;

 private:
  kv_layout layout_;
  kv_elem elem_;
  std::vector<std::unique_ptr<cuda_buffer>> k_, v_;
};

}  // namespace tandem::cuda
