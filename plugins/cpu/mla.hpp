#pragma once
// backend.cpu's multi-head latent attention (MLA, absorbed form) and DeepSeek sparse
// attention's lightning indexer, both over key-only paged caches (see backend.hpp).
//
// Neither op modifies its inputs: the rotated q_rope / indexer q live in per-task scratch,
// and the rotated k_rope / indexer k are written only into the cache.
#include <cstdint>
#include <memory>

#include "host_memory.hpp"
#include "kernels.hpp"
#include "pointwise.hpp"
#include "tandem/backend.hpp"
#include "tandem_ref/attention.hpp"
#include "thread_pool.hpp"
#include "views.hpp"

namespace tandem::cpu {

// kv_b_proj {heads * (nope + v), rank} as f32: head h's W_UK [nope, rank] then W_UV [v, rank].
class cpu_mla final : public mla_weight {
 public:
  cpu_mla(std::unique_ptr<device_buffer> w, int heads, int nope, int v, int rank);

  int heads() const override { return heads_; }
  int nope_dims() const override { return nope_; }
  int v_dims() const override { return v_; }
  int rank() const override { return rank_; }

  const float* uk(int h) const { return w_ + int64_t{h} * (nope_ + v_) * rank_; }  // [nope, rank]
  const float* uv(int h) const { return uk(h) + int64_t{nope_} * rank_; }          // [v, rank]

 private:
  std::unique_ptr<device_buffer> buf_;
  const float* w_;
  int heads_, nope_, v_, rank_;
};

// Checks positions (one per batch row, in [0, 2^20)) and prepares `cache` for them.
void prepare_rotation(rope_cache& cache, const int32_t* positions, int64_t n, float theta, int dims,
                      const char* op);

// q: [n, heads * (nope + rope)]; kv_a: [n, rank + rope]; out: [n, heads * v]. The batch
// has passed ref::check_batch against kv (one head of rank + rope dims); `rc` is prepared
// for (theta, rope_dims) and the batch's positions. topk: nullptr, or [n, k] positions.
void run_mla_attention(thread_pool& pool, const kernel_table& k, const rows_view& q, const rows_view& kv_a,
                       const cpu_mla& w, const ref::paged_kv& kv, const attention_batch& b, int rope_dims,
                       const rope_cache& rc, float scale, const i32_rows_view* topk, const rows_view& out);

// q: [n, heads * d]; k: [n, d]; w: [n, heads]; topk: [n, top_k]. The batch has passed
// ref::check_batch against kv (one head of d dims); `rc` is prepared for the positions.
void run_dsa_indexer(thread_pool& pool, const kernel_table& k, const rows_view& q, const rows_view& kn,
                     const rows_view& w, const ref::paged_kv& kv, const attention_batch& b, int rope_dims,
                     const rope_cache& rc, const i32_rows_view& topk);

}  // namespace tandem::cpu
