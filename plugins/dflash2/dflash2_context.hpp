#pragma once
// One sequence's context for the drafter: for each committed token it observed, its
// position and, per drafter layer, its roped context key Kc and value Vc
// (ARCHITECTURE.md, "Context"). Positions ascend; gaps (a prefix the prefix cache served,
// never observed) are simply absent. Only what a later block can still attend to is kept:
// a block anchored at P reads P - window <= p < P, and P is past every observed position.
//
//   sequence_context c(layers, kv_width, window);
//   c.append(positions, k, v);          // k[l], v[l]: [n, kv_width]
//   c.crop(first_pos);                  // recomputed after a preemption: drop p >= first_pos
//   auto w = c.window(anchor_pos);      // w.n rows of w.k[l] / w.v[l]
#include <cstdint>
#include <span>
#include <vector>

namespace tandem::dflash2 {

class sequence_context {
 public:
  sequence_context(int layers, int64_t kv_width, int64_t window);

  // Drops every entry at position first_pos or later.
  void crop(int64_t first_pos);
  // Appends n entries; positions ascend and follow every held one. k[l], v[l]: [n, kv_width].
  void append(std::span<const int64_t> positions, const std::vector<std::vector<float>>& k,
              const std::vector<std::vector<float>>& v);

  struct view {
    int64_t n = 0;
    std::vector<const float*> k, v;  // per layer: n contiguous rows of kv_width
  };
  // The entries with anchor_pos - window <= p < anchor_pos.
  view window(int64_t anchor_pos) const;

  int64_t size() const { return static_cast<int64_t>(pos_.size()) - first_; }
  // The held positions, oldest first.
  std::span<const int64_t> positions() const { return std::span<const int64_t>(pos_).subspan(static_cast<size_t>(first_)); }
  int64_t newest() const { return size() > 0 ? pos_.back() : -1; }

 private:
  void evict();

  int64_t kv_width_, window_;
  int64_t first_ = 0;  // entries before it are evicted, erased in bulk once they pile up
  std::vector<int64_t> pos_;
  std::vector<std::vector<float>> k_, v_;  // per layer, [pos_.size(), kv_width]
};

}  // namespace tandem::dflash2
