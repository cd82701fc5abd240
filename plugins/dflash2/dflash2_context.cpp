#include "dflash2_context.hpp"

#include <algorithm>
#include <cstddef>
#include <string>

#include "tandem/error.hpp"

namespace tandem::dflash2 {

std::unique_ptr<device_buffer> spare_buffers::take(backend& be, size_t bytes) {
  for (auto it = free.begin(); it != free.end(); ++it)
    if ((*it)->size() >= bytes) {
      std::unique_ptr<device_buffer> b = std::move(*it);
      free.erase(it);
      return b;
    }
  return be.alloc(bytes);
}

void spare_buffers::give(std::unique_ptr<device_buffer> b) {
  if (!b) return;
  if (free.size() >= most) free.erase(free.begin());  // the oldest goes
  free.push_back(std::move(b));
}

sequence_context::sequence_context(backend& be, spare_buffers& spare, int layers, int64_t kv_width, int64_t window,
                                   int64_t block, int taps, int64_t hidden, int64_t pending_rows)
    : be_(&be), spare_(&spare), kv_width_(kv_width), window_(window), block_(block),
      k_(static_cast<size_t>(layers)), v_(static_cast<size_t>(layers)), taps_(taps), hidden_(hidden),
      pending_rows_(pending_rows) {}

sequence_context::~sequence_context() {
  for (auto* set : {&k_, &v_})
    for (auto& b : *set) spare_->give(std::move(b));
  spare_->give(std::move(pending_));
}

float* sequence_context::pending_row(int tap, int64_t row) {
  if (!pending_) pending_ = spare_->take(*be_, static_cast<size_t>(taps_ * pending_stride()) * sizeof(float));
  return static_cast<float*>(pending_->data()) + tap * pending_stride() + row * hidden_;
}

void sequence_context::add_pending(std::span<const int64_t> positions) {
  const auto n = static_cast<int64_t>(positions.size());
  if (pending() + n > pending_rows_) throw error("drafter.dflash2: more pending taps than the buffer holds");
  for (int64_t i = 0; i < n; ++i)
    if (positions[static_cast<size_t>(i)] <= (i ? positions[static_cast<size_t>(i - 1)] : newest()))
      throw error("drafter.dflash2: context positions must ascend past the held ones (got " +
                  std::to_string(positions[static_cast<size_t>(i)]) + ")");
  pending_pos_.insert(pending_pos_.end(), positions.begin(), positions.end());
}

float* sequence_context::at(const std::vector<std::unique_ptr<device_buffer>>& b, int layer, int64_t row) const {
  return static_cast<float*>(b[static_cast<size_t>(layer)]->data()) + row * kv_width_;
}

void sequence_context::crop(int64_t first_pos) {
  const auto keep = std::lower_bound(pos_.begin() + first_, pos_.end(), first_pos) - pos_.begin();
  pos_.resize(static_cast<size_t>(keep));
  pending_pos_.resize(static_cast<size_t>(std::lower_bound(pending_pos_.begin(), pending_pos_.end(), first_pos) -
                                          pending_pos_.begin()));
}

int64_t sequence_context::reserve(int64_t n, int64_t last_pos) {
  // Any later anchor is past last_pos, so rows below last_pos - window are out of every
  // later block's reach (one row is kept for an anchor at last_pos + 1).
  first_ = std::lower_bound(pos_.begin() + first_, pos_.end(), last_pos - window_) - pos_.begin();
  if (end() + n + block_ <= capacity_) return end();
  const int64_t need = size() + n + block_;
  // Compact in place while the dead rows are at least half; otherwise double.
  relocate(2 * need <= capacity_ ? capacity_ : std::max<int64_t>(2 * need, 64));
  return end();
}

void sequence_context::relocate(int64_t capacity) {
  const int64_t live = size();
  const size_t bytes = static_cast<size_t>(live * kv_width_) * sizeof(float);
  std::vector<float> host(static_cast<size_t>(live * kv_width_));
  for (auto* set : {&k_, &v_})
    for (size_t l = 0; l < set->size(); ++l) {
      std::unique_ptr<device_buffer>& b = (*set)[l];
      if (live > 0) {
        be_->copy_to_host(host.data(), at(*set, static_cast<int>(l), first_), bytes);
        be_->synchronize();
      }
      if (capacity != capacity_) {
        spare_->give(std::move(b));
        b = spare_->take(*be_, static_cast<size_t>(capacity * kv_width_) * sizeof(float));
      }
      if (live > 0) be_->copy_to_device(b->data(), host.data(), bytes);
    }
  be_->synchronize();  // `host` dies here
  pos_.erase(pos_.begin(), pos_.begin() + first_);
  first_ = 0;
  capacity_ = capacity;
}

void sequence_context::commit(std::span<const int64_t> positions) {
  const auto n = static_cast<int64_t>(positions.size());
  if (end() + n > capacity_) throw error("drafter.dflash2: context rows committed without room reserved for them");
  const int64_t held = size() > 0 ? pos_.back() : -1;
  for (int64_t i = 0; i < n; ++i)
    if (positions[static_cast<size_t>(i)] <= (i ? positions[static_cast<size_t>(i - 1)] : held))
      throw error("drafter.dflash2: context positions must ascend past the held ones (got " +
                  std::to_string(positions[static_cast<size_t>(i)]) + ")");
  pos_.insert(pos_.end(), positions.begin(), positions.end());
}

sequence_context::rows sequence_context::window(int64_t anchor_pos) const {
  const auto lo = std::lower_bound(pos_.begin() + first_, pos_.end(), anchor_pos - window_) - pos_.begin();
  const auto hi = std::lower_bound(pos_.begin() + lo, pos_.end(), anchor_pos) - pos_.begin();
  return {lo, hi - lo};
}

}  // namespace tandem::dflash2
