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
  ensure(qkv_, n * (qdim + 2 * kvdim) * a);
  ensure(attn_, n * qdim * a);
  ensure(gate_up_, n * 2 * hp_.ffn * a);
  ensure(rows_h_, m * hp_.hidden * a);
  ensure(logits_, m * int64_t(hp_.vocab) * 4);
  for (buf* b : {&ids_, &pos_, &slots_}) ensure(*b, n * 4);
  ensure(qstart_, (s + 1) * 4);
  ensure(seq_lens_, s * 4);
  ensure(pages_, s * max_pages * 4);
  ensure(rows_, m * 4);
  ensure(sampled_, m * 4);
}

namespace {
void* at(const std::unique_ptr<device_buffer>& b, int64_t elems, dtype t) {
  return static_cast<char*>(b->data()) + elems * traits(t).block_bytes;
}
}  // namespace

tensor_view step_workspace::act(const buf& b, int64_t n, int64_t d, int64_t offset) const {
  const dtype t = be_->activation_type();
  return tensor_view::contiguous(at(b, offset, t), t, {n, d}, be_->dev());
}

tensor_view step_workspace::heads(const buf& b, int64_t n, int64_t h, int64_t offset) const {
  const dtype t = be_->activation_type();
  return tensor_view::contiguous(at(b, offset, t), t, {n, h, hp_.head_dim}, be_->dev());
}

tensor_view step_workspace::qkv(int64_t n) const { return act(qkv_, n, qdim() + 2 * kvdim()); }

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
