#pragma once
// What the CPU backend keeps for a linear weight and for the KV pool.
#include <cstdint>
#include <memory>
#include <vector>

#include "host_memory.hpp"
#include "tandem/backend.hpp"
#include "tandem_ref/attention.hpp"

namespace tandem::cpu {

// A weight {out, in}. Quantized and f32/f16 weights point straight at the model file's
// bytes (valid for the weight_format's lifetime, see weight_format.hpp); `owned` holds
// the bytes when load_linear had to convert them (bf16 -> f32).
class cpu_linear final : public linear_weight {
 public:
  cpu_linear(dtype type, const void* data, int64_t out, int64_t in,
             std::unique_ptr<host_buffer> owned = nullptr);

  int64_t in_features() const override { return in_; }
  int64_t out_features() const override { return out_; }
  dtype storage_type() const override { return type_; }

  const uint8_t* row(int64_t o) const { return data_ + o * row_bytes_; }
  int64_t row_bytes() const { return row_bytes_; }

 private:
  dtype type_;
  const uint8_t* data_;
  int64_t out_, in_, row_bytes_;
  std::unique_ptr<host_buffer> owned_;
};

// K and V of every layer, f32, [n_pages, page_size, n_kv_heads, head_dim] each. A
// key-only cache (layout.values == false) allocates no V: layer(l).v is nullptr.
class cpu_kv final : public kv_storage {
 public:
  explicit cpu_kv(const kv_layout& layout);
  const kv_layout& layout() const override { return layout_; }
  // Throws tandem::error naming `op` for a bad layer.
  ref::paged_kv layer(int l, const char* op = "attention") const;

 private:
  kv_layout layout_;
  std::vector<std::unique_ptr<host_buffer>> k_, v_;
};

}  // namespace tandem::cpu
