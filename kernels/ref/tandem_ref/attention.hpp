#pragma once
// Reference paged attention: the KV write and causal GQA attention of attention_batch.
//
// One layer of the pool is K and V, each [n_pages, page_size, n_kv_heads, head_dim] f32.
// Query row r of sequence s (query_start[s] <= r < query_start[s+1], n_new rows) sits at
// position seq_lens[s] - n_new + (r - query_start[s]) of its sequence and attends to the
// keys at positions 0 ..= its own (causal within the chunk). The key at position t lives
// in pool page page_table[s, t / page_size], slot t % page_size. Query head h reads KV
// head h / (n_heads / n_kv_heads).
//
//   ref::paged_kv kv{k_pool, v_pool, n_pages, 16, 3, 64};
//   ref::attention(q, k, v, 9, kv, batch, 1 / sqrtf(64), out);
#include <cstdint>

#include "tandem/backend.hpp"

namespace tandem::ref {

struct paged_kv {
  float* k = nullptr;  // [n_pages, page_size, n_kv_heads, head_dim]
  float* v = nullptr;
  int64_t n_pages = 0;
  int page_size = 0;
  int n_kv_heads = 0;
  int head_dim = 0;

  int64_t token_stride() const { return int64_t{n_kv_heads} * head_dim; }
  int64_t slots() const { return n_pages * page_size; }
};

// Checks every index of `b` against the pool and the heads (GQA: n_heads a multiple of
// n_kv_heads); throws tandem::error naming the first bad field. All the index views are
// i32 host memory.
void check_batch(const attention_batch& b, const paged_kv& kv, int n_heads);

// k, v: [n_tokens, n_kv_heads, head_dim] written to the pool slots of b.slot_mapping.
void kv_write(const float* k, const float* v, const attention_batch& b, const paged_kv& kv);

// out[r, h, :] = softmax(scale * q[r, h, :] . K^T over the allowed keys) V.
// q, out: [n_tokens, n_heads, head_dim]. Reads only the pool (write K/V first).
void paged_attention(const float* q, int n_heads, const paged_kv& kv, const attention_batch& b,
                     float scale, float* out);

// check_batch, kv_write, then paged_attention: what backend::attention does.
void attention(const float* q, const float* k, const float* v, int n_heads, const paged_kv& kv,
               const attention_batch& b, float scale, float* out);

}  // namespace tandem::ref
