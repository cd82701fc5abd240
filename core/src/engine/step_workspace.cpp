#include "step_workspace.hpp"

#include <algorithm>

namespace tandem {

void step_workspace::ensure(buf& b, int64_t bytes) {
  bytes = std::max<int64_t>(bytes, 64);
  if (b && static_cast<int64_t>(b->size()) >= bytes) return;
  b.reset();  // free first: the old buffer is dead, and its memory may serve the new one
  b = be_->alloc(static_cast<size_t>(bytes));
  ++generation_;
}

void step_workspace::reserve(int64_t n, int64_t s, int64_t max_pages, int64_t m) {
  const int64_t a = traits(be_->activation_type()).block_bytes;
  const int64_t qdim = int64_t(hp_.n_heads) * hp_.head_dim;
  const int64_t kvdim = int64_t(hp_.n_kv_heads) * hp_.head_dim;
  for (buf* b : {&x_, &h_, &proj_}) ensure(*b, n * hp_.hidden * a);
  ensure(q_, n * qdim * a);
  ensure(attn_, n * qdim * a);
  ensure(k_, n * kvdim * a);
  ensure(v_, n * kvdim * a);
  ensure(gate_, n * hp_.ffn * a);
  ensure(up_, n * hp_.ffn * a);
  ensure(rows_h_, m * hp_.hidden * a);
  ensure(logits_, m * int64_t(hp_.vocab) * 4);
  for (buf* b : {&ids_, &pos_, &slots_}) ensure(*b, n * 4);
  ensure(qstart_, (s + 1) * 4);
  ensure(seq_lens_, s * 4);
  ensure(pages_, s * max_pages * 4);
  ensure(rows_, m * 4);
  ensure(sampled_, m * 4);
}

tensor_view step_workspace::act(const buf& b, int64_t n, int64_t d) const {
  return tensor_view::contiguous(b->data(), be_->activation_type(), {n, d}, be_->dev());
}

tensor_view step_workspace::heads(const buf& b, int64_t n, int64_t h) const {
  return tensor_view::contiguous(b->data(), be_->activation_type(), {n, h, hp_.head_dim}, be_->dev());
}

tensor_view step_workspace::index(const buf& b, int64_t n) const {
  return tensor_view::contiguous(b->data(), dtype::i32, {n}, be_->dev());
}

tensor_view step_workspace::logits(int64_t m) const {
  return tensor_view::contiguous(logits_->data(), dtype::f32, {m, hp_.vocab}, be_->dev());
}

tensor_view step_workspace::page_table(int64_t s, int64_t pages) const {
  return tensor_view::contiguous(pages_->data(), dtype::i32, {s, pages}, be_->dev());
}

}  // namespace tandem
