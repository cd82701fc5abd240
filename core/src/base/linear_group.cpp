// linear_group and the backend's default grouped linear: parts loaded one by one and run
// one after another, each into its slice of y (see backend.hpp for the layout).
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

}  // namespace tandem
