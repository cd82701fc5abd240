#pragma once
// The CPU paged attention: KV write, then causal GQA attention threaded over
// (sequence, head, block of query rows).
#include "kernels.hpp"
#include "tandem/backend.hpp"
#include "tandem_ref/attention.hpp"
#include "thread_pool.hpp"
#include "views.hpp"

namespace tandem::cpu {

// q, out: [n_tokens, n_heads * head_dim]; k, v: [n_tokens, n_kv_heads * head_dim].
// The batch must have passed ref::check_batch.
void run_attention(thread_pool& pool, const kernel_table& k, const rows_view& q,
                   const rows_view& kn, const rows_view& vn, const ref::paged_kv& kv,
                   const attention_batch& b, int n_heads, float scale, const rows_view& out);

}  // namespace tandem::cpu
