#include "tp_vocab.hpp"

#include <algorithm>

namespace tandem {

void vocab_gather::gather(const tp_group& tp, const float* local, int64_t rows, int64_t vocab, float* out) {
  const part p = split_evenly(vocab, tp.rank, tp.size, "vocabulary");
  // Every rank sends rows x stride (the last, narrower parts padded), so the gather is one
  // equal-sized all-gather; the columns are then put back in vocabulary order.
  const int64_t stride = (vocab + tp.size - 1) / tp.size;
  mine_.assign(static_cast<size_t>(rows * stride), 0.0f);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(local + r * p.count, p.count, mine_.data() + r * stride);
  all_.resize(mine_.size() * static_cast<size_t>(tp.size));
  tp.comm->all_gather(tensor_view::contiguous(mine_.data(), dtype::f32, {rows * stride}, device{}),
                      tensor_view::contiguous(all_.data(), dtype::f32, {tp.size * rows * stride}, device{}));
  for (int k = 0; k < tp.size; ++k) {
    const part q = split_evenly(vocab, k, tp.size, "vocabulary");
    const float* from = all_.data() + static_cast<size_t>(k) * rows * stride;
    for (int64_t r = 0; r < rows; ++r) std::copy_n(from + r * stride, q.count, out + r * vocab + q.begin);
  }
}

}  // namespace tandem
