#include "dflash2_context.hpp"

#include <algorithm>
#include <cstddef>

#include "tandem/error.hpp"

namespace tandem::dflash2 {

sequence_context::sequence_context(int layers, int64_t kv_width, int64_t window)
    : kv_width_(kv_width), window_(window), k_(static_cast<size_t>(layers)), v_(static_cast<size_t>(layers)) {}

void sequence_context::crop(int64_t first_pos) {
  const auto keep = static_cast<size_t>(std::lower_bound(pos_.begin() + first_, pos_.end(), first_pos) - pos_.begin());
  pos_.resize(keep);
  for (auto& k : k_) k.resize(keep * static_cast<size_t>(kv_width_));
  for (auto& v : v_) v.resize(keep * static_cast<size_t>(kv_width_));
}

void sequence_context::append(std::span<const int64_t> positions, const std::vector<std::vector<float>>& k,
                              const std::vector<std::vector<float>>& v) {
  const auto n = static_cast<int64_t>(positions.size());
  if (n == 0) return;
  for (int64_t i = 0; i < n; ++i)
    if (positions[static_cast<size_t>(i)] <= (i ? positions[static_cast<size_t>(i - 1)] : newest()))
      throw error("drafter.dflash2: context positions must ascend past the held ones (got " +
                  std::to_string(positions[static_cast<size_t>(i)]) + ")");
  if (k.size() != k_.size() || v.size() != v_.size()) throw error("drafter.dflash2: context rows for the wrong layer count");
  pos_.insert(pos_.end(), positions.begin(), positions.end());
  for (size_t l = 0; l < k_.size(); ++l) {
    if (static_cast<int64_t>(k[l].size()) != n * kv_width_ || static_cast<int64_t>(v[l].size()) != n * kv_width_)
      throw error("drafter.dflash2: context rows of the wrong width");
    k_[l].insert(k_[l].end(), k[l].begin(), k[l].end());
    v_[l].insert(v_[l].end(), v[l].begin(), v[l].end());
  }
  evict();
}

// Any later anchor P is past the newest observed position q, so entries below q - window
// are out of every later block's reach (below q + 1 - window, keeping one for an anchor
// at q itself).
void sequence_context::evict() {
  const int64_t oldest_needed = newest() - window_;
  first_ = std::lower_bound(pos_.begin() + first_, pos_.end(), oldest_needed) - pos_.begin();
  // Erase the dead prefix once it is as large as the window: amortized O(1) per entry.
  if (first_ < std::max<int64_t>(window_, 64)) return;
  const auto rows = static_cast<std::ptrdiff_t>(first_), width = static_cast<std::ptrdiff_t>(kv_width_);
  pos_.erase(pos_.begin(), pos_.begin() + rows);
  for (auto& k : k_) k.erase(k.begin(), k.begin() + rows * width);
  for (auto& v : v_) v.erase(v.begin(), v.begin() + rows * width);
  first_ = 0;
}

sequence_context::view sequence_context::window(int64_t anchor_pos) const {
  const auto lo = std::lower_bound(pos_.begin() + first_, pos_.end(), anchor_pos - window_) - pos_.begin();
  const auto hi = std::lower_bound(pos_.begin() + lo, pos_.end(), anchor_pos) - pos_.begin();
  view w;
  w.n = hi - lo;
  for (size_t l = 0; l < k_.size(); ++l) {
    w.k.push_back(k_[l].data() + lo * kv_width_);
    w.v.push_back(v_[l].data() + lo * kv_width_);
  }
  return w;
}

}  // namespace tandem::dflash2
