#pragma once
// Device buffers one forward pass works in, sized for the largest step seen so far.
// Views are cut to the step's actual size; buffers only grow, so addresses stay fixed
// between steps of the same or smaller size (what a recorded CUDA graph needs).
#include <cstdint>
#include <memory>

#include "llama_hparams.hpp"
#include "tandem/backend.hpp"

namespace tandem {

class step_workspace {
 public:
  void init(backend& be, const llama_hparams& hp) { be_ = &be, hp_ = hp; }
  // Makes room for a step of n_tokens tokens, n_seqs sequences of at most max_pages
  // pages each, and n_rows logits rows.
  void reserve(int64_t n_tokens, int64_t n_seqs, int64_t max_pages, int64_t n_rows);

  // Bumped whenever a buffer is reallocated: recorded steps of an older generation refer
  // to freed addresses and must not be replayed.
  uint64_t generation() const { return generation_; }

  tensor_view x(int64_t n) const { return act(x_, n, hp_.hidden); }          // residual stream
  tensor_view h(int64_t n) const { return act(h_, n, hp_.hidden); }          // normed input
  // q, k and v are one buffer in linear_group layout (all of q, then k, then v), so the
  // grouped q/k/v linear writes them with one call; gate and up likewise.
  tensor_view qkv(int64_t n) const;                                          // [n, q + 2 kv]
  tensor_view q(int64_t n) const { return heads(qkv_, n, hp_.n_heads, 0); }
  tensor_view k(int64_t n) const { return heads(qkv_, n, hp_.n_kv_heads, n * qdim()); }
  tensor_view v(int64_t n) const { return heads(qkv_, n, hp_.n_kv_heads, n * (qdim() + kvdim())); }
  tensor_view attn(int64_t n) const { return heads(attn_, n, hp_.n_heads); }
  tensor_view proj(int64_t n) const { return act(proj_, n, hp_.hidden); }    // block output
  tensor_view gate_up(int64_t n) const { return act(gate_up_, n, 2 * hp_.ffn); }
  tensor_view gate(int64_t n) const { return act(gate_up_, n, hp_.ffn); }
  tensor_view up(int64_t n) const { return act(gate_up_, n, hp_.ffn, n * hp_.ffn); }
  tensor_view rows_h(int64_t m) const { return act(rows_h_, m, hp_.hidden); }
  tensor_view logits(int64_t m) const;                                      // f32 [m, vocab]

  tensor_view ids(int64_t n) const { return index(ids_, n); }
  tensor_view positions(int64_t n) const { return index(pos_, n); }
  tensor_view slots(int64_t n) const { return index(slots_, n); }
  tensor_view query_start(int64_t s) const { return index(qstart_, s + 1); }
  tensor_view seq_lens(int64_t s) const { return index(seq_lens_, s); }
  tensor_view page_table(int64_t s, int64_t pages) const;
  tensor_view rows(int64_t m) const { return index(rows_, m); }
  tensor_view sampled(int64_t m) const { return index(sampled_, m); }

 private:
  using buf = std::unique_ptr<device_buffer>;
  void ensure(buf& b, int64_t bytes);
  tensor_view act(const buf& b, int64_t n, int64_t d, int64_t offset = 0) const;
  tensor_view heads(const buf& b, int64_t n, int64_t heads, int64_t offset = 0) const;
  int64_t qdim() const { return int64_t(hp_.n_heads) * hp_.head_dim; }
  int64_t kvdim() const { return int64_t(hp_.n_kv_heads) * hp_.head_dim; }
  tensor_view index(const buf& b, int64_t n) const;

  backend* be_ = nullptr;
  llama_hparams hp_;
  buf x_, h_, qkv_, attn_, proj_, gate_up_, rows_h_, logits_;
  buf ids_, pos_, slots_, qstart_, seq_lens_, pages_, rows_, sampled_;
  uint64_t generation_ = 0;
};

}  // namespace tandem
