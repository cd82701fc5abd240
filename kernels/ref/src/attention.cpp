// Reference paged attention (see tandem_ref/attention.hpp): a plain two-pass softmax per
// query row and head, fp32 throughout.
#include "tandem_ref/attention.hpp"

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tandem/error.hpp"

namespace tandem::ref {
namespace {

[[noreturn]] void fail(const std::string& what) { throw error("attention: " + what); }

void check_index_view(const tensor_view& v, const char* field, int64_t len) {
  if (v.type != dtype::i32 || v.data == nullptr || v.dev != cpu_device) {
    fail(std::string(field) + " must be an i32 host tensor");
  }
  if (v.numel() < len) {
    fail(std::string(field) + " has " + std::to_string(v.numel()) + " elements, needs " +
         std::to_string(len));
  }
}

int32_t idx(const tensor_view& v, int64_t i) { return v.at<int32_t>(i); }
int32_t page_of(const attention_batch& b, int s, int64_t logical) {
  return b.page_table.at<int32_t>(s, logical);
}

void check_seq(const attention_batch& b, const paged_kv& kv, int s) {
  const int32_t q0 = idx(b.query_start, s), q1 = idx(b.query_start, s + 1);
  const int32_t len = idx(b.seq_lens, s);
  const std::string tag = "sequence " + std::to_string(s) + ": ";
  if (q0 < 0 || q1 < q0 || q1 > b.n_tokens) fail(tag + "query_start is not increasing in [0, n_tokens]");
  if (len < q1 - q0) fail(tag + "seq_lens " + std::to_string(len) + " < its new tokens");
  const int64_t pages = (int64_t{len} + kv.page_size - 1) / kv.page_size;
  if (pages > b.max_pages_per_seq) fail(tag + "needs more pages than max_pages_per_seq");
  for (int64_t lp = 0; lp < pages; ++lp) {
    const int32_t pg = page_of(b, s, lp);
    if (pg < 0 || pg >= kv.n_pages) fail(tag + "page_table entry " + std::to_string(pg) + " outside the pool");
  }
  for (int32_t r = q0; r < q1; ++r) {
    const int64_t pos = len - (q1 - q0) + (r - q0);
    const int64_t want = int64_t{page_of(b, s, pos / kv.page_size)} * kv.page_size + pos % kv.page_size;
    if (idx(b.slot_mapping, r) != want) {
      fail(tag + "slot_mapping[" + std::to_string(r) + "] = " +
           std::to_string(idx(b.slot_mapping, r)) + " but its page_table slot is " +
           std::to_string(want));
    }
  }
}

}  // namespace

void check_batch(const attention_batch& b, const paged_kv& kv, int n_heads) {
  if (kv.n_kv_heads <= 0 || n_heads <= 0 || n_heads % kv.n_kv_heads != 0) {
    fail(std::to_string(n_heads) + " query heads is not a multiple of " +
         std::to_string(kv.n_kv_heads) + " KV heads");
  }
  if (b.n_seqs < 0 || b.n_tokens < 0 || kv.page_size <= 0) fail("negative batch sizes");
  check_index_view(b.query_start, "query_start", b.n_seqs + 1);
  check_index_view(b.seq_lens, "seq_lens", b.n_seqs);
  check_index_view(b.slot_mapping, "slot_mapping", b.n_tokens);
  check_index_view(b.positions, "positions", b.n_tokens);
  if (b.n_seqs > 0) {
    check_index_view(b.page_table, "page_table", int64_t{b.n_seqs} * b.max_pages_per_seq);
    if (b.page_table.ndim != 2) fail("page_table must be [n_seqs, max_pages_per_seq]");
    if (idx(b.query_start, 0) != 0 || idx(b.query_start, b.n_seqs) != b.n_tokens) {
      fail("query_start must run from 0 to n_tokens");
    }
  }
  for (int s = 0; s < b.n_seqs; ++s) check_seq(b, kv, s);
}

void kv_write(const float* k, const float* v, const attention_batch& b, const paged_kv& kv) {
  const int64_t ts = kv.token_stride();
  for (int64_t r = 0; r < b.n_tokens; ++r) {
    const int64_t slot = idx(b.slot_mapping, r);
    for (int64_t j = 0; j < ts; ++j) {
      kv.k[slot * ts + j] = k[r * ts + j];
      kv.v[slot * ts + j] = v[r * ts + j];
    }
  }
}

void paged_attention(const float* q, int n_heads, const paged_kv& kv, const attention_batch& b,
                     float scale, float* out) {
  const int d = kv.head_dim;
  const int group = n_heads / kv.n_kv_heads;
  const int64_t ts = kv.token_stride();
  std::vector<float> scores;
  for (int s = 0; s < b.n_seqs; ++s) {
    const int32_t q0 = idx(b.query_start, s), q1 = idx(b.query_start, s + 1);
    const int32_t len = idx(b.seq_lens, s);
    scores.resize(static_cast<size_t>(len));
    for (int32_t r = q0; r < q1; ++r) {
      const int64_t n_keys = len - (q1 - q0) + (r - q0) + 1;
      for (int h = 0; h < n_heads; ++h) {
        const float* qv = q + (int64_t{r} * n_heads + h) * d;
        const int64_t head_off = int64_t{h / group} * d;
        float mx = -std::numeric_limits<float>::infinity();
        for (int64_t t = 0; t < n_keys; ++t) {
          const int64_t slot = int64_t{page_of(b, s, t / kv.page_size)} * kv.page_size + t % kv.page_size;
          const float* kr = kv.k + slot * ts + head_off;
          float dot = 0.0f;
          for (int j = 0; j < d; ++j) dot += qv[j] * kr[j];
          scores[t] = dot * scale;
          mx = std::max(mx, scores[t]);
        }
        float sum = 0.0f;
        for (int64_t t = 0; t < n_keys; ++t) sum += scores[t] = std::exp(scores[t] - mx);
        float* o = out + (int64_t{r} * n_heads + h) * d;
        for (int j = 0; j < d; ++j) o[j] = 0.0f;
        for (int64_t t = 0; t < n_keys; ++t) {
          const int64_t slot = int64_t{page_of(b, s, t / kv.page_size)} * kv.page_size + t % kv.page_size;
          const float* vr = kv.v + slot * ts + head_off;
          const float p = scores[t] / sum;
          for (int j = 0; j < d; ++j) o[j] += p * vr[j];
        }
      }
    }
  }
}

void attention(const float* q, const float* k, const float* v, int n_heads, const paged_kv& kv,
               const attention_batch& b, float scale, float* out) {
  check_batch(b, kv, n_heads);
  kv_write(k, v, b, kv);
  paged_attention(q, n_heads, kv, b, scale, out);
}

}  // namespace tandem::ref
