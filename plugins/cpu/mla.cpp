// MLA attention: the cache write (the latent row with its k_rope rotated), then per
// (query row, block of heads) the absorbed scores over the row's keys: q_lat = W_UK^T q_nope
// joined with the rotated q_rope is one vector of rank + rope dims, dotted with each cached
// [c | k_rope] row; softmax; the weighted sum of the latents; W_UV.
//
// The indexer: the key write (first rope_dims rotated), then per query row the scores of
// all its causal keys (split into blocks of keys when there are few rows, so a decode step
// still uses every thread), then a partial sort for the top k.
#include "mla.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>
#include <string>
#include <vector>

#include "tandem/error.hpp"

namespace tandem::cpu {
namespace {

// Dims (2i, 2i+1) of v rotated by the angle of pair i: the rope() convention, neox = false.
void rotate_pairs(float* v, int dims, const float* c, const float* s) {
  for (int i = 0; i < dims / 2; ++i) {
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c[i] - x1 * s[i];
    v[2 * i + 1] = x0 * s[i] + x1 * c[i];
  }
}

struct row_info {
  const int32_t* pages;  // the row's sequence's page table
  int32_t last;          // causal position of the row: it sees keys 0 ..= last
};

std::vector<row_info> row_infos(const attention_batch& b) {
  std::vector<row_info> rows(static_cast<size_t>(b.n_tokens));
  for (int s = 0; s < b.n_seqs; ++s) {
    const int32_t q0 = b.query_start.at<int32_t>(s), q1 = b.query_start.at<int32_t>(s + 1);
    const int32_t first = b.seq_lens.at<int32_t>(s) - (q1 - q0);
    const int32_t* pages = &b.page_table.at<int32_t>(s, 0);
    for (int32_t r = q0; r < q1; ++r) rows[r] = {pages, first + (r - q0)};
  }
  return rows;
}

int64_t slot_of(const row_info& ri, int64_t t, int page_size) {
  return int64_t{ri.pages[t / page_size]} * page_size + t % page_size;
}

// Copies row r of src (kv.head_dim floats) to its cache slot and rotates `dims` of it
// starting at `offset`.
void write_rotated(const rows_view& src, const ref::paged_kv& kv, const attention_batch& b, int offset,
                   int dims, const rope_cache& rc) {
  const int64_t d = kv.head_dim;
  for (int64_t r = 0; r < b.n_tokens; ++r) {
    float* dst = kv.k + int64_t{b.slot_mapping.at<int32_t>(r)} * d;
    std::memcpy(dst, src.row(r), sizeof(float) * d);
    const int32_t pos = b.positions.at<int32_t>(r);
    if (dims > 0) rotate_pairs(dst + offset, dims, rc.cos_row(pos), rc.sin_row(pos));
  }
}

}  // namespace

cpu_mla::cpu_mla(std::unique_ptr<device_buffer> w, int heads, int nope, int v, int rank)
    : buf_(std::move(w)),
      w_(static_cast<const float*>(buf_->data())),
      heads_(heads),
      nope_(nope),
      v_(v),
      rank_(rank) {}

void prepare_rotation(rope_cache& cache, const int32_t* positions, int64_t n, float theta, int dims,
                      const char* op) {
  int64_t max_pos = 0;
  for (int64_t t = 0; t < n; ++t) {
    if (positions[t] < 0 || positions[t] >= rope_cache::max_cached_positions) {
      throw error(std::string("backend.cpu ") + op + ": batch.positions[" + std::to_string(t) +
                  "] = " + std::to_string(positions[t]) + " is outside [0, 2^20)");
    }
    max_pos = std::max<int64_t>(max_pos, positions[t]);
  }
  if (dims > 0) cache.prepare(theta, dims, max_pos);
}

void run_mla_attention(thread_pool& pool, const kernel_table& k, const rows_view& q, const rows_view& kv_a,
                       const cpu_mla& w, const ref::paged_kv& kv, const attention_batch& b, int rope_dims,
                       const rope_cache& rc, float scale, const i32_rows_view* topk, const rows_view& out) {
  const int heads = w.heads(), nope = w.nope_dims(), vd = w.v_dims(), rank = w.rank();
  const int d = kv.head_dim;  // rank + rope_dims
  write_rotated(kv_a, kv, b, rank, rope_dims, rc);
  const std::vector<row_info> rows = row_infos(b);
  const int64_t n = b.n_tokens;
  // Enough (row, head block) tasks to balance the threads, heads kept together otherwise.
  const int64_t per_row =
      std::clamp<int64_t>((int64_t{8} * pool.size() + n - 1) / std::max<int64_t>(n, 1), 1, heads);
  const int64_t hb = (heads + per_row - 1) / per_row, n_blocks = (heads + hb - 1) / hb;
  pool.parallel_for(n * n_blocks, [&](int64_t task) {
    thread_local std::vector<int32_t> keys;
    thread_local std::vector<float> qq, scores, o;
    const int64_t r = task / n_blocks;
    const int h0 = static_cast<int>((task % n_blocks) * hb),
              h1 = static_cast<int>(std::min<int64_t>(heads, h0 + hb));
    const row_info& ri = rows[r];
    int64_t n_keys = int64_t{ri.last} + 1;
    if (topk != nullptr) {  // the listed positions of the causal context, each once
      keys.clear();
      const int32_t* sel = topk->row(r);
      for (int64_t j = 0; j < topk->cols; ++j) {
        if (sel[j] >= 0 && sel[j] <= ri.last) keys.push_back(sel[j]);
      }
      std::sort(keys.begin(), keys.end());
      keys.erase(std::unique(keys.begin(), keys.end()), keys.end());
      n_keys = static_cast<int64_t>(keys.size());
    }
    const int32_t pos = b.positions.at<int32_t>(r);
    qq.resize(static_cast<size_t>(d));
    scores.resize(static_cast<size_t>(n_keys));
    o.resize(static_cast<size_t>(rank));
    for (int h = h0; h < h1; ++h) {
      float* oh = out.row(r) + int64_t{h} * vd;
      if (n_keys == 0) {  // nothing to attend to: a zero output
        std::memset(oh, 0, sizeof(float) * vd);
        continue;
      }
      const float* qh = q.row(r) + int64_t{h} * (nope + rope_dims);
      const float* uk = w.uk(h);
      std::fill(qq.begin(), qq.begin() + rank, 0.0f);
      for (int j = 0; j < nope; ++j) k.axpy(qq.data(), qh[j], uk + int64_t{j} * rank, rank);
      std::memcpy(qq.data() + rank, qh + nope, sizeof(float) * rope_dims);
      if (rope_dims > 0) rotate_pairs(qq.data() + rank, rope_dims, rc.cos_row(pos), rc.sin_row(pos));
      float mx = -INFINITY;
      for (int64_t i = 0; i < n_keys; ++i) {
        const int64_t t = topk != nullptr ? keys[i] : i;
        scores[i] = k.dot(qq.data(), kv.k + slot_of(ri, t, kv.page_size) * d, d) * scale;
        mx = std::max(mx, scores[i]);
      }
      float sum = 0.0f;
      for (int64_t i = 0; i < n_keys; ++i) sum += scores[i] = std::exp(scores[i] - mx);
      std::fill(o.begin(), o.end(), 0.0f);
      for (int64_t i = 0; i < n_keys; ++i) {
        const int64_t t = topk != nullptr ? keys[i] : i;
        k.axpy(o.data(), scores[i], kv.k + slot_of(ri, t, kv.page_size) * d, rank);
      }
      k.scale(o.data(), 1.0f / sum, rank);
      const float* uv = w.uv(h);
      for (int j = 0; j < vd; ++j) oh[j] = k.dot(uv + int64_t{j} * rank, o.data(), rank);
    }
  });
}

void run_dsa_indexer(thread_pool& pool, const kernel_table& k, const rows_view& q, const rows_view& kn,
                     const rows_view& w, const ref::paged_kv& kv, const attention_batch& b, int rope_dims,
                     const rope_cache& rc, const i32_rows_view& topk) {
  const int d = kv.head_dim;
  const int64_t heads = w.cols, n = b.n_tokens, top_k = topk.cols;
  write_rotated(kn, kv, b, 0, rope_dims, rc);
  const std::vector<row_info> rows = row_infos(b);
  const float q_scale = 1.0f / std::sqrt(static_cast<float>(d));
  const float h_scale = 1.0f / std::sqrt(static_cast<float>(heads));

  // dst[t - t0] = the score of key t of row r, t in [t0, t1).
  auto score_keys = [&](int64_t r, int64_t t0, int64_t t1, float* dst) {
    thread_local std::vector<float> qr, wh;
    qr.assign(q.row(r), q.row(r) + heads * d);
    wh.resize(static_cast<size_t>(heads));
    const int32_t pos = b.positions.at<int32_t>(r);
    for (int64_t h = 0; h < heads; ++h) {
      if (rope_dims > 0) rotate_pairs(qr.data() + h * d, rope_dims, rc.cos_row(pos), rc.sin_row(pos));
      wh[h] = w.row(r)[h] * h_scale;
    }
    for (int64_t t = t0; t < t1; ++t) {
      const float* kt = kv.k + slot_of(rows[r], t, kv.page_size) * d;
      float acc = 0.0f;
      for (int64_t h = 0; h < heads; ++h) {
        const float s = k.dot(qr.data() + h * d, kt, d) * q_scale;
        if (s > 0.0f) acc += wh[h] * s;
      }
      dst[t - t0] = std::isnan(acc) ? -INFINITY : acc;
    }
  };
  // The top_k of row r's n_keys scores: best first, ties to the lower position; -1 after.
  auto select = [&](int64_t r, const float* sc, int64_t n_keys) {
    thread_local std::vector<int32_t> idx;
    idx.resize(static_cast<size_t>(n_keys));
    std::iota(idx.begin(), idx.end(), 0);
    const int64_t m = std::min(top_k, n_keys);
    std::partial_sort(idx.begin(), idx.begin() + m, idx.end(),
                      [sc](int32_t a, int32_t c) { return sc[a] > sc[c] || (sc[a] == sc[c] && a < c); });
    int32_t* dst = topk.row(r);
    std::copy(idx.begin(), idx.begin() + m, dst);
    std::fill(dst + m, dst + top_k, -1);
  };

  if (n >= 2 * pool.size()) {  // rows enough for every thread: one task per row
    pool.parallel_for(n, [&](int64_t r) {
      thread_local std::vector<float> sc;
      const int64_t n_keys = int64_t{rows[r].last} + 1;
      sc.resize(static_cast<size_t>(n_keys));
      score_keys(r, 0, n_keys, sc.data());
      select(r, sc.data(), n_keys);
    });
    return;
  }
  // Few rows (decode): score blocks of keys in parallel, then select per row.
  constexpr int64_t key_block = 256;
  std::vector<int64_t> offset(static_cast<size_t>(n + 1), 0);
  struct task {
    int64_t r, t0, t1;
  };
  std::vector<task> tasks;
  for (int64_t r = 0; r < n; ++r) {
    const int64_t n_keys = int64_t{rows[r].last} + 1;
    offset[r + 1] = offset[r] + n_keys;
    for (int64_t t = 0; t < n_keys; t += key_block) tasks.push_back({r, t, std::min(n_keys, t + key_block)});
  }
  std::vector<float> scores(static_cast<size_t>(offset[n]));
  pool.parallel_for(static_cast<int64_t>(tasks.size()), [&](int64_t i) {
    const task& t = tasks[i];
    score_keys(t.r, t.t0, t.t1, scores.data() + offset[t.r] + t.t0);
  });
  pool.parallel_for(n, [&](int64_t r) { select(r, scores.data() + offset[r], offset[r + 1] - offset[r]); });
}

}  // namespace tandem::cpu
