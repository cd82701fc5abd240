#include "cuda_weights.hpp"

#include <cstring>
#include <string>

#include "check.hpp"
#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"

namespace tandem::cuda {
namespace {

std::unique_ptr<cuda_buffer> upload(const void* host, size_t bytes, cudaStream_t stream) {
  auto b = std::make_unique<cuda_buffer>(bytes);
  check(cudaMemcpyAsync(b->data(), host, bytes, cudaMemcpyHostToDevice, stream), "load_linear");
  return b;
}

// GGML blocks -> quants of every block, then scales (see dev_matrix).
template <class Block, size_t QBytes, class Scale>
void repack(const Block* src, int64_t blocks, std::vector<uint8_t>& qs, std::vector<Scale>& sc,
            Scale (*scale_of)(const Block&)) {
  qs.resize(static_cast<size_t>(blocks) * QBytes);
  sc.resize(static_cast<size_t>(blocks));
  for (int64_t b = 0; b < blocks; ++b) {
    std::memcpy(qs.data() + b * QBytes, src[b].qs, QBytes);
    sc[b] = scale_of(src[b]);
  }
}

}  // namespace

cuda_linear::cuda_linear(const tensor_info& t, bool with_f16, cudaStream_t stream) : type_(t.type) {
  upload_weight(t, with_f16, stream);
}

cuda_linear::cuda_linear(std::span<const tensor_info* const> parts, bool with_f16, cudaStream_t stream) {
  if (parts.empty() || parts.size() > 4) throw error("backend.cuda: a linear group has 1 to 4 parts");
  const tensor_info& first = *parts.front();
  std::string name = "group(";
  std::vector<uint8_t> bytes;
  int64_t out = 0;
  for (const tensor_info* p : parts) {
    if (p->shape.size() != 2 || p->type != first.type || p->shape[1] != first.shape[1])
      throw error("backend.cuda: linear group parts " + first.name + " and " + p->name +
                  " differ in type or input width");
    const auto rb = row_bytes(p->type, p->shape[1]);
    if (!rb || p->nbytes < static_cast<size_t>(*rb * p->shape[0]))
      throw error("backend.cuda: linear " + p->name + " is truncated");
    const auto* d = static_cast<const uint8_t*>(p->data);
    bytes.insert(bytes.end(), d, d + *rb * p->shape[0]);
    name += (out ? "," : "") + p->name;
    out += p->shape[0];
  }
  tensor_info cat{name + ")", first.type, {out, first.shape[1]}, bytes.data(), bytes.size()};
  type_ = cat.type;
  upload_weight(cat, with_f16, stream);
  m_.n_segs = static_cast<int>(parts.size());
  int64_t end = 0;
  for (size_t i = 0; i < parts.size(); ++i) m_.seg[i + 1] = end += parts[i]->shape[0];
}

void cuda_linear::upload_weight(const tensor_info& t, bool with_f16, cudaStream_t stream) {
  if (t.shape.size() != 2)
    throw error("backend.cuda: linear " + t.name + " must be 2-D, has " + std::to_string(t.shape.size()) + " dims");
  m_.out = t.shape[0];
  m_.in = t.shape[1];
  if (m_.in % 32 != 0)
    throw error("backend.cuda: linear " + t.name + " has " + std::to_string(m_.in) +
                " columns, not a multiple of 32");
  const int64_t blocks = m_.out * (m_.in / 32);
  std::vector<uint8_t> qs;
  if (t.type == dtype::q4_1) {
    std::vector<uint32_t> sc;
    repack<block_q4_1, 16, uint32_t>(static_cast<const block_q4_1*>(t.data), blocks, qs, sc,
                                     [](const block_q4_1& b) { return uint32_t{b.d} | uint32_t{b.m} << 16; });
    m_.format = wformat::q4_1;
    scales_ = upload(sc.data(), sc.size() * 4, stream);
    qs_ = upload(qs.data(), qs.size(), stream);
  } else if (t.type == dtype::q8_0) {
    std::vector<uint16_t> sc;
    repack<block_q8_0, 32, uint16_t>(static_cast<const block_q8_0*>(t.data), blocks, qs, sc,
                                     [](const block_q8_0& b) { return b.d; });
    m_.format = wformat::q8_0;
    scales_ = upload(sc.data(), sc.size() * 2, stream);
    qs_ = upload(qs.data(), qs.size(), stream);
  } else if (t.type == dtype::f32 || t.type == dtype::f16 || t.type == dtype::bf16) {
    std::vector<float> f(static_cast<size_t>(m_.out * m_.in));
    const int64_t rb = *row_bytes(t.type, m_.in);
    for (int64_t o = 0; o < m_.out; ++o)
      dequantize_row(t.type, static_cast<const uint8_t*>(t.data) + o * rb, f.data() + o * m_.in, m_.in);
    m_.format = wformat::f32;
    type_ = dtype::f32;
    qs_ = upload(f.data(), f.size() * 4, stream);
  } else {
    throw error("backend.cuda: linear " + t.name + " has type " + t.type_name() +
                " (supported: q4_1, q8_0, f32, f16, bf16)");
  }
  m_.qs = qs_->data();
  m_.scales = scales_ ? scales_->data() : nullptr;
  m_.n_segs = 1;
  m_.seg[0] = 0, m_.seg[1] = m_.out;
  if (with_f16) {
    f16_ = std::make_unique<cuda_buffer>(static_cast<size_t>(m_.out * m_.in) * 2);
    dequantize_f16(m_, static_cast<__half*>(f16_->data()), stream);
    check_launch("load_linear");
  }
  // The host copies above die with this constructor.
  check(cudaStreamSynchronize(stream), "load_linear");
}

namespace {

kv_elem kv_elem_of(const kv_layout& layout) {
  // Key-only caches (MLA latent, DSA indexer keys) are read by f32-only kernels.
  if (!layout.values && layout.type != dtype::f32)
    throw error("backend.cuda: a key-only (MLA / DSA) cache is f32, asked for " + std::string(name(layout.type)));
  switch (layout.type) {
    case dtype::f32: return kv_elem::f32;
    case dtype::bf16: return kv_elem::bf16;
    case dtype::fp8_e4m3: return kv_elem::fp8_e4m3;
    default:
      throw error("backend.cuda: the KV pool is f32, bf16 or fp8_e4m3, asked for " + std::string(name(layout.type)));
  }
}

}  // namespace

cuda_kv::cuda_kv(const kv_layout& layout) : layout_(layout), elem_(kv_elem_of(layout)) {
  // GQA attention's kernels are specialised by head size; key-only caches are read by the
  // MLA and DSA kernels, which take any width their ops accept (checked there).
  if (layout.values && !attention_head_dim_supported(layout.head_dim))
    throw error("backend.cuda: attention supports head_dim 64 and 128, not " + std::to_string(layout.head_dim));
  if (layout.n_layers <= 0 || layout.n_pages <= 0 || layout.page_size <= 0 || layout.n_kv_heads <= 0 ||
      layout.head_dim <= 0)
    throw error("backend.cuda: empty KV layout");
  const size_t bytes = static_cast<size_t>(layout.n_pages) * layout.page_size * layout.n_kv_heads *
                       layout.head_dim * kv_elem_bytes(elem_);
  for (int l = 0; l < layout.n_layers; ++l) {
    k_.push_back(std::make_unique<cuda_buffer>(bytes));
    if (layout.values) v_.push_back(std::make_unique<cuda_buffer>(bytes));
  }
}

dev_kv cuda_kv::layer(int l) const {
  if (l < 0 || l >= layout_.n_layers)
    throw error("backend.cuda: KV layer " + std::to_string(l) + " of " + std::to_string(layout_.n_layers));
  if (!layout_.values)
    throw error("backend.cuda: attention needs a K and V cache; this one is key-only (an MLA / DSA cache)");
  return {k_[l]->data(), v_[l]->data(), layout_.n_pages, layout_.page_size, layout_.n_kv_heads, layout_.head_dim,
          elem_};
}

float* cuda_kv::keys(int l, const char* op) const {
  if (layout_.values)
    throw error(std::string("backend.cuda: ") + op + ": kv must be a key-only cache (kv_layout::values = false)");
  if (l < 0 || l >= layout_.n_layers)
    throw error(std::string("backend.cuda: ") + op + ": KV layer " + std::to_string(l) + " of " +
                std::to_string(layout_.n_layers));
  return static_cast<float*>(k_[l]->data());
}

}  // namespace tandem::cuda
