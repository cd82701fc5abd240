// linear_group and the backend's default grouped linear: parts loaded one by one and run
// one after another, each into its slice of y (see backend.hpp for the layout); and the
// default linear_fused(): the separate ops through a scratch buffer; the default
// linear_swiglu(): linear() then silu_mul().
#include <algorithm>
#include <string>

#include "tandem/backend.hpp"
#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"

namespace tandem {

linear_group::linear_group(std::vector<std::unique_ptr<linear_weight>> parts) : parts_(std::move(parts)) {
  if (parts_.empty()) throw error("linear_group: no parts");
  for (const auto& p : parts_) {
    if (p->in_features() != parts_.front()->in_features())
      throw error("linear_group: parts have different input widths");
    out_ += p->out_features();
  }
}

std::unique_ptr<linear_weight> backend::load_linear_group(std::span<const tensor_info* const> parts) {
  std::vector<std::unique_ptr<linear_weight>> loaded;
  for (const tensor_info* t : parts) loaded.push_back(load_linear(*t));
  return std::make_unique<linear_group>(std::move(loaded));
}

bool backend::run_group(const linear_weight& w, tensor_view x, tensor_view y) {
  const auto* g = dynamic_cast<const linear_group*>(&w);
  if (g == nullptr) return false;
  const int64_t in = g->in_features();
  const int64_t n = in > 0 ? x.numel() / in : 0;
  if (x.numel() != n * in || y.numel() != n * g->out_features())
    throw error("linear (group): x and y do not fit the group's " + std::to_string(g->out_features()) + " x " +
                std::to_string(in) + " rows");
  auto* base = static_cast<char*>(y.data);
  const size_t elem = static_cast<size_t>(traits(y.type).block_bytes);
  int64_t offset = 0;
  for (const auto& p : g->parts()) {
    tensor_view part = tensor_view::contiguous(base + static_cast<size_t>(offset) * elem, y.type,
                                               {n, p->out_features()}, y.dev);
    linear(*p, x, part);
    offset += n * p->out_features();
  }
  return true;
}

namespace {

[[noreturn]] void fused_fail(const std::string& what) { throw error("linear_fused: " + what); }

// v as a contiguous [rows, cols] view (the ops below take 2-D views).
tensor_view as_rows(const tensor_view& v, int64_t rows, int64_t cols, const char* what) {
  if (!v.is_contiguous()) fused_fail(std::string(what) + " must be contiguous");
  if (v.numel() != rows * cols) fused_fail(std::string(what) + " has the wrong number of elements");
  return tensor_view::contiguous(v.data, v.type, {rows, cols}, v.dev);
}

size_t elem_bytes(dtype t) {
  if (traits(t).block_elems != 1) fused_fail("activations of " + std::string(name(t)) + " are not supported");
  return static_cast<size_t>(traits(t).block_bytes);
}

}  // namespace

void backend::linear_fused(const linear_weight& w, tensor_view x, const linear_prologue& pro, tensor_view y,
                           bool accumulate) {
  using kind = linear_prologue::kind;
  const int64_t in = w.in_features(), out = w.out_features();
  const int64_t n = in > 0 ? x.numel() / in : 0;
  if (x.numel() != n * in || y.numel() != n * out)
    fused_fail("x and y do not fit the weight [" + std::to_string(out) + ", " + std::to_string(in) + "]");
  if (pro.k == kind::none && !accumulate) return linear(w, x, y);
  if (y.data == x.data || (pro.k == kind::silu_mul && y.data == pro.up.data)) fused_fail("y must not alias x or up");
  // Scratch: the prologue's output [n, in], then the product [n, out] that is added to y.
  const size_t x_bytes = pro.k == kind::none ? 0 : (static_cast<size_t>(n * in) * elem_bytes(x.type) + 255) / 256 * 256;
  const size_t y_bytes = accumulate ? static_cast<size_t>(n * out) * elem_bytes(y.type) : 0;
  if (!fused_scratch_ || fused_scratch_->size() < x_bytes + y_bytes) {
    fused_scratch_.reset();  // free first: its memory may serve the new one
    fused_scratch_ = alloc(std::max<size_t>(x_bytes + y_bytes, 256));
  }
  auto* base = static_cast<char*>(fused_scratch_->data());
  tensor_view xin = x;
  if (pro.k != kind::none) {
    xin = tensor_view::contiguous(base, x.type, {n, in}, dev());
    const tensor_view xr = as_rows(x, n, in, "x");
    if (pro.k == kind::rms_norm) rms_norm(xr, pro.norm_weight, pro.eps, xin);
    else silu_mul(xr, as_rows(pro.up, n, in, "up"), xin);
  }
  if (!accumulate) return linear(w, xin, y);
  const tensor_view prod = tensor_view::contiguous(base + x_bytes, y.type, {n, out}, dev());
  linear(w, xin, prod);
  const tensor_view yr = as_rows(y, n, out, "y");
  add(yr, prod, yr);
}

void backend::linear_swiglu(const linear_weight& gate_up, tensor_view x, tensor_view product, tensor_view y) {
  const int64_t in = gate_up.in_features(), out = gate_up.out_features(), ffn = out / 2;
  const int64_t n = in > 0 ? x.numel() / in : 0;
  if (out % 2 != 0) throw error("linear_swiglu: the gate_up weight has an odd number of rows (" + std::to_string(out) + ")");
  if (x.numel() != n * in || product.numel() != n * out || y.numel() != n * ffn)
    throw error("linear_swiglu: x, product and y do not fit the weight [" + std::to_string(out) + ", " +
                std::to_string(in) + "]");
  if (!product.is_contiguous() || !y.is_contiguous()) throw error("linear_swiglu: product and y must be contiguous");
  linear(gate_up, x, product);
  auto* base = static_cast<char*>(product.data);
  const size_t half = static_cast<size_t>(n * ffn) * static_cast<size_t>(traits(product.type).block_bytes);
  const tensor_view gate = tensor_view::contiguous(base, product.type, {n, ffn}, product.dev);
  const tensor_view up = tensor_view::contiguous(base + half, product.type, {n, ffn}, product.dev);
  silu_mul(gate, up, tensor_view::contiguous(y.data, y.type, {n, ffn}, y.dev));
}

}  // namespace tandem
