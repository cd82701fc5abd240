// Two passes per query row and head over its keys, page by page: scores (dot products),
// then softmax weights applied to V with axpy. Query blocks keep tasks small enough to
// balance a long causal prefill over the threads.
#include "attention.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

namespace tandem::cpu {
namespace {

constexpr int query_block = 16;

struct task {
  int seq;
  int head;
  int32_t r0, r1;  // query rows [r0, r1)
};

struct seq_info {
  const int32_t* pages;
  int64_t first_pos;  // position of the sequence's first query row
  int32_t q0;
};

void one_query(const kernel_table& k, const ref::paged_kv& kv, const seq_info& s,
               const float* qv, int64_t n_keys, int64_t head_off, float scale,
               std::vector<float>& scores, float* o) {
  const int d = kv.head_dim;
  const int64_t ts = kv.token_stride();
  scores.resize(static_cast<size_t>(n_keys));
  float mx = -INFINITY;
  for (int64_t t0 = 0; t0 < n_keys; t0 += kv.page_size) {
    const float* kp = kv.k + int64_t{s.pages[t0 / kv.page_size]} * kv.page_size * ts + head_off;
    const int64_t n = std::min<int64_t>(kv.page_size, n_keys - t0);
    for (int64_t j = 0; j < n; ++j) {
      scores[t0 + j] = k.dot(qv, kp + j * ts, d) * scale;
      mx = std::max(mx, scores[t0 + j]);
    }
  }
  float sum = 0.0f;
  for (int64_t t = 0; t < n_keys; ++t) sum += scores[t] = std::exp(scores[t] - mx);
  std::memset(o, 0, sizeof(float) * d);
  for (int64_t t0 = 0; t0 < n_keys; t0 += kv.page_size) {
    const float* vp = kv.v + int64_t{s.pages[t0 / kv.page_size]} * kv.page_size * ts + head_off;
    const int64_t n = std::min<int64_t>(kv.page_size, n_keys - t0);
    for (int64_t j = 0; j < n; ++j) k.axpy(o, scores[t0 + j], vp + j * ts, d);
  }
  k.scale(o, 1.0f / sum, d);
}

void write_kv(const rows_view& kn, const rows_view& vn, const ref::paged_kv& kv,
              const attention_batch& b) {
  const int64_t ts = kv.token_stride();
  for (int64_t r = 0; r < b.n_tokens; ++r) {
    const int64_t slot = b.slot_mapping.at<int32_t>(r);
    std::memcpy(kv.k + slot * ts, kn.row(r), sizeof(float) * ts);
    std::memcpy(kv.v + slot * ts, vn.row(r), sizeof(float) * ts);
  }
}

}  // namespace

void run_attention(thread_pool& pool, const kernel_table& k, const rows_view& q,
                   const rows_view& kn, const rows_view& vn, const ref::paged_kv& kv,
                   const attention_batch& b, int n_heads, float scale, const rows_view& out) {
  write_kv(kn, vn, kv, b);
  std::vector<seq_info> seqs(static_cast<size_t>(b.n_seqs));
  std::vector<task> tasks;
  for (int s = 0; s < b.n_seqs; ++s) {
    const int32_t q0 = b.query_start.at<int32_t>(s), q1 = b.query_start.at<int32_t>(s + 1);
    seqs[s] = {&b.page_table.at<int32_t>(s, 0), b.seq_lens.at<int32_t>(s) - (q1 - q0), q0};
    for (int h = 0; h < n_heads; ++h) {
      for (int32_t r = q0; r < q1; r += query_block) tasks.push_back({s, h, r, std::min(q1, r + query_block)});
    }
  }
  const int group = n_heads / kv.n_kv_heads;
  const int d = kv.head_dim;
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t i) {
    thread_local std::vector<float> scores;
    const task& t = tasks[i];
    const seq_info& s = seqs[t.seq];
    for (int32_t r = t.r0; r < t.r1; ++r) {
      const int64_t n_keys = s.first_pos + (r - s.q0) + 1;
      one_query(k, kv, s, q.row(r) + int64_t{t.head} * d, n_keys, int64_t{t.head / group} * d,
                scale, scores, out.row(r) + int64_t{t.head} * d);
    }
  });
}

}  // namespace tandem::cpu
