#include "cpu_weights.hpp"

#include <string>

#include "tandem/error.hpp"

namespace tandem::cpu {

cpu_linear::cpu_linear(dtype type, const void* data, int64_t out, int64_t in,
                       std::unique_ptr<host_buffer> owned)
    : type_(type),
      data_(static_cast<const uint8_t*>(data)),
      out_(out),
      in_(in),
      row_bytes_(::tandem::row_bytes(type, in).value_or(0)),
      owned_(std::move(owned)) {}

cpu_kv::cpu_kv(const kv_layout& layout) : layout_(layout) {
  if (layout.type != dtype::f32) {
    throw error("backend.cpu alloc_kv: KV type " + std::string(name(layout.type)) +
                " is not supported (f32 only)");
  }
  if (layout.n_layers <= 0 || layout.n_pages <= 0 || layout.page_size <= 0 ||
      layout.n_kv_heads <= 0 || layout.head_dim <= 0) {
    throw error("backend.cpu alloc_kv: every kv_layout size must be positive");
  }
  const size_t bytes = static_cast<size_t>(layout.n_pages) * layout.page_size *
                       layout.n_kv_heads * layout.head_dim * sizeof(float);
  for (int l = 0; l < layout.n_layers; ++l) {
    k_.push_back(std::make_unique<host_buffer>(bytes));
    if (layout.values) v_.push_back(std::make_unique<host_buffer>(bytes));
  }
}

ref::paged_kv cpu_kv::layer(int l, const char* op) const {
  if (l < 0 || l >= layout_.n_layers) {
    throw error(std::string("backend.cpu ") + op + ": layer " + std::to_string(l) +
                " outside the KV pool's " + std::to_string(layout_.n_layers) + " layers");
  }
  return {static_cast<float*>(k_[l]->data()),
          layout_.values ? static_cast<float*>(v_[l]->data()) : nullptr,
          layout_.n_pages, layout_.page_size, layout_.n_kv_heads, layout_.head_dim};
}

}  // namespace tandem::cpu
