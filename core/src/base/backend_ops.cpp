// The backend op families: names for messages, supports()' default, the defaults of
// add_rms_norm_keep() and linear_add_rms_norm() (dense ops one after another), the
// defaults of the ops beyond the dense family (each throws naming the backend and the
// op); new_recording_owner().
#include <atomic>
#include <string>

#include "tandem/backend.hpp"
#include "tandem/error.hpp"

namespace tandem {

uint64_t new_recording_owner() {
  static std::atomic<uint64_t> next{1};
  return next.fetch_add(1);
}

std::string_view name(backend_op op) {
  switch (op) {
    case backend_op::embed: return "embed";
    case backend_op::rms_norm: return "rms_norm";
    case backend_op::linear: return "linear";
    case backend_op::rope: return "rope";
    case backend_op::silu_mul: return "silu_mul";
    case backend_op::add: return "add";
    case backend_op::gather_rows: return "gather_rows";
    case backend_op::sample: return "sample";
    case backend_op::attention_gqa: return "attention_gqa";
    case backend_op::layer_norm: return "layer_norm";
    case backend_op::attention_mla: return "attention_mla";
    case backend_op::dsa_indexer: return "dsa_indexer";
    case backend_op::moe_route: return "moe_route";
    case backend_op::moe_experts: return "moe_experts";
    case backend_op::attention_full: return "attention_full";
    case backend_op::dynamic_conv: return "dynamic_conv";
    case backend_op::top_k: return "top_k";
  }
  return "?";
}

std::string_view family(backend_op op) {
  switch (op) {
    case backend_op::attention_gqa:
    case backend_op::attention_mla:
    case backend_op::dsa_indexer: return "attention";
    case backend_op::moe_route:
    case backend_op::moe_experts: return "moe";
    case backend_op::layer_norm: return "norm";
    // attention_full is an attention, but every backend runs it (a host default): dense.
    default: return "dense";
  }
}

mla_weight::~mla_weight() = default;
expert_weights::~expert_weights() = default;

bool backend::supports(backend_op op) const {
  return family(op) == "dense" || op == backend_op::attention_gqa;
}

void backend::unsupported(backend_op op) const {
  throw error(describe() + ": op " + std::string(name(op)) + " (" + std::string(family(op)) +
              " family) is not implemented");
}

void backend::add_rms_norm_keep(tensor_view residual, tensor_view x, tensor_view weight, float eps, tensor_view out,
                                tensor_view kept) {
  add(residual, x, kept);  // before add_rms_norm() updates residual
  add_rms_norm(residual, x, weight, eps, out);
}

void backend::linear_add_rms_norm(const linear_weight& w, tensor_view x, tensor_view product, tensor_view residual,
                                  tensor_view weight, float eps, tensor_view out, tensor_view kept) {
  linear(w, x, product);
  if (kept.data != nullptr) return add_rms_norm_keep(residual, product, weight, eps, out, kept);
  add_rms_norm(residual, product, weight, eps, out);
}

void backend::layer_norm(tensor_view, tensor_view, tensor_view, float, tensor_view) {
  unsupported(backend_op::layer_norm);
}
std::unique_ptr<mla_weight> backend::load_mla(const tensor_info&, int, int, int) {
  unsupported(backend_op::attention_mla);
}
void backend::mla_attention(tensor_view, tensor_view, const mla_weight&, kv_storage&, int, const attention_batch&,
                            const mla_params&, tensor_view, tensor_view) {
  unsupported(backend_op::attention_mla);
}
void backend::dsa_indexer(tensor_view, tensor_view, tensor_view, kv_storage&, int, const attention_batch&, int,
                          float, int, tensor_view) {
  unsupported(backend_op::dsa_indexer);
}
std::unique_ptr<expert_weights> backend::load_experts(std::span<const tensor_info* const>,
                                                      std::span<const tensor_info* const>,
                                                      std::span<const tensor_info* const>) {
  unsupported(backend_op::moe_experts);
}
void backend::moe_route(tensor_view, tensor_view, const moe_routing&, tensor_view, tensor_view) {
  unsupported(backend_op::moe_route);
}
void backend::moe_experts(const expert_weights&, tensor_view, tensor_view, tensor_view, tensor_view) {
  unsupported(backend_op::moe_experts);
}

}  // namespace tandem
