#include "tp_vocab.hpp"

#include <algorithm>

namespace tandem {

void vocab_gather::gather(const tp_group& tp, backend& be, const float* local, int64_t rows, int64_t vocab,
                          float* out) {
  const bool host = be.dev().kind == device_kind::cpu;
  const part p = split_evenly(vocab, tp.rank, tp.size, "vocabulary");
  if (!host) {
    local_host_.resize(static_cast<size_t>(rows * p.count));
    be.copy_to_host(local_host_.data(), local, local_host_.size() * sizeof(float));
    be.synchronize();
    local = local_host_.data();
  }
  // Every rank sends rows x stride (the last, narrower parts padded), so the gather is one
  // equal-sized all-gather; the columns are then put back in vocabulary order.
  const int64_t stride = (vocab + tp.size - 1) / tp.size;
  mine_.assign(static_cast<size_t>(rows * stride), 0.0f);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(local + r * p.count, p.count, mine_.data() + r * stride);
  all_.resize(mine_.size() * static_cast<size_t>(tp.size));
  const size_t mine_bytes = mine_.size() * sizeof(float), all_bytes = all_.size() * sizeof(float);
  if (host) {
    tp.comm->all_gather(tensor_view::contiguous(mine_.data(), dtype::f32, {rows * stride}, device{}),
                        tensor_view::contiguous(all_.data(), dtype::f32, {tp.size * rows * stride}, device{}));
  } else {
    if (!mine_dev_ || mine_dev_->size() < mine_bytes) mine_dev_ = be.alloc(mine_bytes);
    if (!all_dev_ || all_dev_->size() < all_bytes) all_dev_ = be.alloc(all_bytes);
    be.copy_to_device(mine_dev_->data(), mine_.data(), mine_bytes);
    tp.comm->all_gather(tensor_view::contiguous(mine_dev_->data(), dtype::f32, {rows * stride}, be.dev()),
                        tensor_view::contiguous(all_dev_->data(), dtype::f32, {tp.size * rows * stride}, be.dev()));
    be.copy_to_host(all_.data(), all_dev_->data(), all_bytes);
    be.synchronize();
    out_host_.resize(static_cast<size_t>(rows * vocab));
  }
  float* dst = host ? out : out_host_.data();
  for (int k = 0; k < tp.size; ++k) {
    const part q = split_evenly(vocab, k, tp.size, "vocabulary");
    const float* from = all_.data() + static_cast<size_t>(k) * rows * stride;
    for (int64_t r = 0; r < rows; ++r) std::copy_n(from + r * stride, q.count, dst + r * vocab + q.begin);
  }
  if (!host) be.copy_to_device(out, out_host_.data(), out_host_.size() * sizeof(float));
}

}  // namespace tandem
