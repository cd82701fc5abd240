#pragma once
// One sequence's context for the drafter, held on the target's backend: for each committed
// token it observed, its position and, per drafter layer, its roped context key Kc and value
// Vc (ARCHITECTURE.md, "Context"), as rows of a K and a V buffer, oldest first. Positions
// ascend; gaps (a prefix the prefix cache served, never observed) are simply absent. Only
// what a later block can still attend to is kept: a block anchored at P reads
// P - window <= p < P, and P is past every observed position.
//
// After the held rows there is always room for one block: a block forward writes its own
// keys and values there, so that the window and the block are one run of rows that a
// single attention reads.
//
//   sequence_context c(be, spare, layers, kv_width, window, block);
//   int64_t at = c.reserve(n, last_pos);   // room for n rows at `at` (may move the rows)
//   ... write rows at..at+n of c.k(l) / c.v(l) ...
//   c.commit(positions);                   // those rows now hold these positions
//   c.crop(first_pos);                     // recomputed after a preemption: drop p >= first_pos
//   auto w = c.window(anchor_pos);         // rows [w.first, w.first + w.n); block at c.end()
//
// Taps can also wait as they came (pending): a sequence that is not drafting then pays one
// copy per observed run of tokens (all taps at once: they are rows of one buffer), and its
// context rows are computed together, one product over many rows, when a block needs them
// or the pending buffer is full.
//   int64_t at = c.pending();              // copy n rows of each tap to pending_row(i, at..)
//   c.add_pending(positions);
//   ... compute context rows from pending_row(i, 0..pending()) ...; c.clear_pending();
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "tandem/backend.hpp"

namespace tandem::dflash2 {

// Buffers of finished sequences, reused by new ones (a device allocation may be slow and
// may synchronize).
struct spare_buffers {
  std::vector<std::unique_ptr<device_buffer>> free;
  size_t most = 64;
  std::unique_ptr<device_buffer> take(backend& be, size_t bytes);
  void give(std::unique_ptr<device_buffer> b);
};

class sequence_context {
 public:
  // pending_rows: taps kept before their rows are computed (0: none), each of `hidden` f32.
  sequence_context(backend& be, spare_buffers& spare, int layers, int64_t kv_width, int64_t window, int64_t block,
                   int taps, int64_t hidden, int64_t pending_rows);
  ~sequence_context();
  sequence_context(const sequence_context&) = delete;
  sequence_context& operator=(const sequence_context&) = delete;

  // Drops every entry at position first_pos or later (pending ones too).
  void crop(int64_t first_pos);
  // Room for n new rows whose newest position will be last_pos, plus a block after them:
  // drops rows no later block can reach (p < last_pos - window), moves or grows the
  // buffers when needed (through host memory: rare, amortized), and returns the row where
  // the new rows go (end()).
  int64_t reserve(int64_t n, int64_t last_pos);
  // The rows reserve() returned now hold `positions` (ascending, past every held one).
  void commit(std::span<const int64_t> positions);

  struct rows {
    int64_t first = 0;
    int64_t n = 0;
  };
  // The held rows with anchor_pos - window <= p < anchor_pos.
  rows window(int64_t anchor_pos) const;
  // Row index past the newest held row: where a block's rows go.
  int64_t end() const { return static_cast<int64_t>(pos_.size()); }
  // Device pointers to row `row` of layer `layer`'s keys / values.
  float* k(int layer, int64_t row) const { return at(k_, layer, row); }
  float* v(int layer, int64_t row) const { return at(v_, layer, row); }

  int64_t size() const { return static_cast<int64_t>(pos_.size()) - first_; }
  // The held positions, oldest first.
  std::span<const int64_t> positions() const { return std::span<const int64_t>(pos_).subspan(static_cast<size_t>(first_)); }
  // The newest position observed, held or pending (-1: none).
  int64_t newest() const {
    return !pending_pos_.empty() ? pending_pos_.back() : size() > 0 ? pos_.back() : -1;
  }

  int64_t pending() const { return static_cast<int64_t>(pending_pos_.size()); }
  int64_t pending_capacity() const { return pending_rows_; }
  std::span<const int64_t> pending_positions() const { return pending_pos_; }
  // Device pointer to pending row `row` of tap `tap`: one buffer [taps, pending_capacity,
  // hidden], so tap i's rows from `row` on are pending_row(0, row) + i * pending_stride().
  float* pending_row(int tap, int64_t row);
  int64_t pending_stride() const { return pending_rows_ * hidden_; }  // floats
  // The rows at pending() .. + n now hold these positions (ascending, past every observed one).
  void add_pending(std::span<const int64_t> positions);
  void clear_pending() { pending_pos_.clear(); }

 private:
  float* at(const std::vector<std::unique_ptr<device_buffer>>& b, int layer, int64_t row) const;
  void relocate(int64_t capacity);  // live rows to row 0 of buffers of `capacity` rows

  backend* be_;
  spare_buffers* spare_;
  int64_t kv_width_, window_, block_;
  int64_t capacity_ = 0;  // rows per buffer
  int64_t first_ = 0;     // rows before it are evicted (their positions still in pos_)
  std::vector<int64_t> pos_;  // position of each row [0, end())
  std::vector<std::unique_ptr<device_buffer>> k_, v_;  // per layer, [capacity, kv_width] f32
  int taps_;
  int64_t hidden_, pending_rows_;
  std::vector<int64_t> pending_pos_;
  std::unique_ptr<device_buffer> pending_;  // [taps, pending_rows, hidden] f32 (on first use)
};

}  // namespace tandem::dflash2
