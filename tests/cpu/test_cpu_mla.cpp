#define BOOST_TEST_MODULE cpu_mla
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_backends.hpp"
#include "cpu_weights.hpp"
#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"
#include "test_util.hpp"

// backend.cpu's mla_attention and dsa_indexer against naive formulations written here.
//
// MLA: the NON-absorbed form. Each cached token t gets per head the full key
// K_h = [W_UK[h] c_t ; rot(k_rope_t)] and value V_h = W_UV[h] c_t, the query is
// [q_nope ; rot(q_rope)], and attention is the textbook softmax, all in double. The backend
// absorbs W_UK into the query and W_UV after the weighted sum: the same maths in another
// order, so float round-off only (tolerance 1e-4 relative). The rotation here is its own
// code: pairs (2i, 2i+1) by pos * theta^(-2i / rope_dims).
//
// Indexer: every causal score in double, then the expected top-k by score (ties to the lower
// position). Random scores can be near-tied, so the check is on the chosen positions'
// scores; a dedicated test with exactly tied keys checks the order itself.
using namespace tandem;
using test::view;

namespace {

using test::backends;

constexpr float theta = 10000.0f;

// Rotates dims (2i, 2i+1) of v, i < dims / 2, by the angle of position pos.
void rotate(float* v, int dims, int64_t pos) {
  for (int i = 0; i < dims / 2; ++i) {
    const double a = static_cast<double>(pos) * std::pow(static_cast<double>(theta), -2.0 * i / dims);
    const auto c = static_cast<float>(std::cos(a)), s = static_cast<float>(std::sin(a));
    const float x0 = v[2 * i], x1 = v[2 * i + 1];
    v[2 * i] = x0 * c - x1 * s;
    v[2 * i + 1] = x0 * s + x1 * c;
  }
}

bool close(double got, double want, double rel) {
  return std::fabs(got - want) <= rel * (1.0 + std::fabs(want));
}

// Row r of the batch: its sequence (index into the spec list) and position.
struct row_pos {
  int seq;
  int pos;
};
std::vector<row_pos> rows_of(const std::vector<test::seq_spec>& seqs) {
  std::vector<row_pos> rows;
  for (int s = 0; s < static_cast<int>(seqs.size()); ++s) {
    for (int t = seqs[s].cached; t < seqs[s].cached + seqs[s].n_new; ++t) rows.push_back({s, t});
  }
  return rows;
}

// ---- MLA

struct mla_case {
  int heads = 4, nope = 16, rope = 8, v = 12, rank = 32;
  int page_size = 4;
  int64_t n_pages = 24;
  dtype wtype = dtype::f32;
};

struct mla_fixture {
  mla_case c;
  cpu::cpu_backend& be;
  test::test_weight kvb;
  std::vector<float> w;  // kv_b dequantized, [heads * (nope + v), rank]
  std::unique_ptr<mla_weight> mw;
  kv_layout layout;
  std::unique_ptr<kv_storage> kv;
  std::vector<std::vector<std::vector<float>>> hist;  // per sequence, per position: [c | rot(k_rope)]

  mla_fixture(cpu::cpu_backend& backend, const mla_case& cs, std::mt19937& rng) : c(cs), be(backend) {
    const int64_t rows = int64_t{c.heads} * (c.nope + c.v);
    kvb = test::random_weight(rng, c.wtype, rows, c.rank);
    w.resize(static_cast<size_t>(rows * c.rank));
    const int64_t rb = *row_bytes(c.wtype, c.rank);
    for (int64_t r = 0; r < rows; ++r)
      dequantize_row(c.wtype, kvb.bytes.data() + r * rb, w.data() + r * c.rank, c.rank);
    mw = be.load_mla(kvb.info, c.heads, c.nope, c.v);
    layout = {2, c.n_pages, c.page_size, 1, c.rank + c.rope, dtype::f32};
    layout.values = false;
    kv = be.alloc_kv(layout);
  }

  // The naive output of one query row (q row of heads * (nope + rope)) over `keys`.
  std::vector<double> naive(const float* q, const std::vector<std::vector<float>>& h, int pos,
                            const std::vector<int>& keys, float scale) const {
    std::vector<double> out(static_cast<size_t>(c.heads) * c.v, 0.0);
    if (keys.empty()) return out;
    const int qd = c.nope + c.rope;
    for (int hd = 0; hd < c.heads; ++hd) {
      const float* wk = w.data() + int64_t{hd} * (c.nope + c.v) * c.rank;
      const float* wv = wk + int64_t{c.nope} * c.rank;
      std::vector<float> qh(q + hd * qd, q + (hd + 1) * qd);
      rotate(qh.data() + c.nope, c.rope, pos);
      std::vector<double> s;
      for (int t : keys) {
        const std::vector<float>& row = h[t];
        std::vector<double> key(static_cast<size_t>(qd));  // [W_UK c ; k_rope]
        for (int i = 0; i < c.nope; ++i) {
          for (int j = 0; j < c.rank; ++j) key[i] += double{wk[i * c.rank + j]} * row[j];
        }
        for (int i = 0; i < c.rope; ++i) key[c.nope + i] = row[c.rank + i];
        double dot = 0.0;
        for (int i = 0; i < qd; ++i) dot += qh[i] * key[i];
        s.push_back(dot * scale);
      }
      const double mx = *std::max_element(s.begin(), s.end());
      double sum = 0.0;
      for (double& x : s) sum += x = std::exp(x - mx);
      for (size_t i = 0; i < keys.size(); ++i) {
        const std::vector<float>& row = h[keys[i]];
        for (int o = 0; o < c.v; ++o) {  // V = W_UV c
          double val = 0.0;
          for (int j = 0; j < c.rank; ++j) val += double{wv[o * c.rank + j]} * row[j];
          out[hd * c.v + o] += s[i] / sum * val;
        }
      }
    }
    return out;
  }

  // One call on the given inputs; checks the output, the cache and that q / kv_a are
  // unchanged; returns the output.
  std::vector<float> step(const std::vector<test::seq_spec>& seqs, std::vector<float> q, std::vector<float> a,
                          std::vector<int32_t> sel, int k, const std::string& what) {
    test::batch_builder b(seqs, c.page_size);
    const int64_t n = b.batch.n_tokens;
    const int qd = c.nope + c.rope, ad = c.rank + c.rope;
    std::vector<float> out(static_cast<size_t>(n * c.heads * c.v), 7.0f);
    const std::vector<float> q0 = q, a0 = a;
    mla_params p;
    p.rope_dims = c.rope;
    p.rope_theta = theta;
    p.scale = 1.0f / std::sqrt(static_cast<float>(qd));
    be.mla_attention(view(q, {n, c.heads, qd}), view(a, {n, ad}), *mw, *kv, 1, b.batch, p,
                     k > 0 ? view(sel, {n, k}) : tensor_view{}, view(out, {n, c.heads, c.v}));
    BOOST_TEST((q == q0), what << ": q was modified");
    BOOST_TEST((a == a0), what << ": kv_a was modified");
    const std::vector<row_pos> rows = rows_of(seqs);
    hist.resize(std::max(hist.size(), seqs.size()));
    for (int64_t r = 0; r < n; ++r) {  // the cache rows of this step, as the reference makes them
      auto& h = hist[rows[r].seq];
      h.resize(std::max<size_t>(h.size(), rows[r].pos + 1));
      h[rows[r].pos].assign(a.begin() + r * ad, a.begin() + (r + 1) * ad);
      rotate(h[rows[r].pos].data() + c.rank, c.rope, rows[r].pos);
    }
    const ref::paged_kv pool = dynamic_cast<cpu::cpu_kv&>(*kv).layer(1);
    for (int64_t r = 0; r < n; ++r) {
      const float* slot = pool.k + int64_t{b.slot_mapping[r]} * ad;
      const auto& want = hist[rows[r].seq][rows[r].pos];
      for (int j = 0; j < ad; ++j) {
        if (!close(slot[j], want[j], 1e-6)) {
          BOOST_ERROR(what << ": cache row " << r << " dim " << j << " is " << slot[j] << ", expected "
                           << want[j]);
          break;
        }
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      std::vector<int> keys;
      if (k > 0) {
        std::set<int> allowed;
        for (int j = 0; j < k; ++j) {
          const int t = sel[r * k + j];
          if (t >= 0 && t <= rows[r].pos) allowed.insert(t);
        }
        keys.assign(allowed.begin(), allowed.end());
      } else {
        for (int t = 0; t <= rows[r].pos; ++t) keys.push_back(t);
      }
      const std::vector<double> want =
          naive(q.data() + r * c.heads * qd, hist[rows[r].seq], rows[r].pos, keys, p.scale);
      for (size_t i = 0; i < want.size(); ++i) {
        const float got = out[r * c.heads * c.v + i];
        if (!close(got, want[i], 1e-4)) {
          BOOST_ERROR(what << " (" << be.kernels().name << ", " << name(c.wtype) << "): row " << r
                           << " element " << i << " is " << got << ", naive " << want[i]);
          return out;
        }
      }
    }
    return out;
  }

  // Random inputs (and, with k > 0, random top-k lists with -1s, duplicates and positions
  // past the row's own).
  std::vector<float> random_step(const std::vector<test::seq_spec>& seqs, int k, std::mt19937& rng,
                                 const std::string& what) {
    const std::vector<row_pos> rows = rows_of(seqs);
    const auto n = static_cast<int64_t>(rows.size());
    std::vector<int32_t> sel;
    for (int64_t r = 0; r < n && k > 0; ++r) {
      std::uniform_int_distribution<int> pick(-1, rows[r].pos + 2);
      for (int j = 0; j < k; ++j) sel.push_back(pick(rng));
    }
    return step(seqs, test::random_floats(rng, n * c.heads * (c.nope + c.rope)),
                test::random_floats(rng, n * (c.rank + c.rope)), sel, k, what);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(mla_matches_non_absorbed_attention_over_mixed_batches) {
  std::mt19937 rng(41);
  for (auto& be : backends()) {
    for (dtype t : {dtype::f32, dtype::bf16, dtype::f16, dtype::q8_0}) {
      for (int k : {0, 5}) {
        mla_case c;
        c.wtype = t;
        mla_fixture fx(*be, c, rng);
        const std::string tag = k > 0 ? "topk " : "dense ";
        // A prefills 7 over pages {5, 2}, B 3 on {9}.
        fx.random_step({{{5, 2}, 0, 7}, {{9}, 0, 3}}, k, rng, tag + "step 1");
        // A decodes (ends page 2), B adds a chunk of 6 over {9, 0, 11}, C a 1-token prompt.
        fx.random_step({{{5, 2}, 7, 1}, {{9, 0, 11}, 3, 6}, {{17}, 0, 1}}, k, rng, tag + "step 2");
        // All decode; A moves onto a new page.
        fx.random_step({{{5, 2, 3}, 8, 1}, {{9, 0, 11}, 9, 1}, {{17}, 1, 1}}, k, rng, tag + "step 3");
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(mla_other_shapes_and_many_heads) {
  std::mt19937 rng(42);
  cpu::cpu_backend be({2, 64, nullptr});
  mla_case c;
  c.heads = 16;  // more heads than tasks per row need: blocks of heads
  c.nope = 8;
  c.rope = 4;
  c.v = 8;
  c.rank = 64;
  c.page_size = 16;
  mla_fixture fx(be, c, rng);
  fx.random_step({{{3, 1}, 0, 20}}, 0, rng, "prefill 20");
  fx.random_step({{{3, 1}, 20, 1}}, 0, rng, "decode");
  fx.random_step({{{3, 1}, 21, 1}}, 8, rng, "decode with topk");
}

BOOST_AUTO_TEST_CASE(mla_chunked_prefill_equals_one_call) {
  std::mt19937 rng(43);
  for (int k : {0, 6}) {
    cpu::cpu_backend be({2, 64, nullptr});
    mla_case c;
    mla_fixture whole(be, c, rng), chunked(be, c, rng);
    chunked.w = whole.w;  // the same weight in both
    chunked.mw = be.load_mla(whole.kvb.info, c.heads, c.nope, c.v);
    const int n = 10, split = 4, qd = c.heads * (c.nope + c.rope), ad = c.rank + c.rope;
    const std::vector<int32_t> pages{7, 3, 12};
    auto q = test::random_floats(rng, n * qd), a = test::random_floats(rng, n * ad);
    std::vector<int32_t> sel;
    for (int r = 0; r < n && k > 0; ++r) {
      std::uniform_int_distribution<int> pick(-1, r);
      for (int j = 0; j < k; ++j) sel.push_back(pick(rng));
    }
    const std::vector<float> all = whole.step({{pages, 0, n}}, q, a, sel, k, "one call");
    auto part = [&](int r0, int r1, const std::vector<float>& v, int width) {
      return std::vector<float>(v.begin() + r0 * width, v.begin() + r1 * width);
    };
    auto part_i = [&](int r0, int r1) {
      return k > 0 ? std::vector<int32_t>(sel.begin() + r0 * k, sel.begin() + r1 * k)
                   : std::vector<int32_t>{};
    };
    const std::vector<float> first = chunked.step({{pages, 0, split}}, part(0, split, q, qd),
                                                  part(0, split, a, ad), part_i(0, split), k, "first chunk");
    const std::vector<float> rest = chunked.step({{pages, split, n - split}}, part(split, n, q, qd),
                                                 part(split, n, a, ad), part_i(split, n), k, "second chunk");
    std::vector<float> joined = first;
    joined.insert(joined.end(), rest.begin(), rest.end());
    BOOST_TEST(joined == all, boost::test_tools::per_element());
  }
}

BOOST_AUTO_TEST_CASE(mla_rejects_bad_arguments) {
  std::mt19937 rng(44);
  cpu::cpu_backend be({1, 64, nullptr});
  mla_case c;
  mla_fixture fx(be, c, rng);
  test::batch_builder b({{{1}, 0, 2}}, c.page_size);
  const int qd = c.nope + c.rope, ad = c.rank + c.rope;
  std::vector<float> q(2 * c.heads * qd), a(2 * ad), out(2 * c.heads * c.v);
  mla_params p;
  p.rope_dims = c.rope;
  auto call = [&](kv_storage& kv, int layer, const mla_params& pp, tensor_view qv, tensor_view outv) {
    be.mla_attention(qv, view(a, {2, ad}), *fx.mw, kv, layer, b.batch, pp, tensor_view{}, outv);
  };
  auto msg_of = [&](auto&& fn) -> std::string {
    try {
      fn();
    } catch (const error& e) {
      return e.what();
    }
    return "";
  };
  const tensor_view qv = view(q, {2, c.heads, qd}), ov = view(out, {2, c.heads, c.v});
  BOOST_CHECK_NO_THROW(call(*fx.kv, 0, p, qv, ov));
  BOOST_CHECK_THROW(call(*fx.kv, 2, p, qv, ov), error);
  kv_layout kvv = fx.layout;
  kvv.values = true;
  auto with_values = be.alloc_kv(kvv);
  BOOST_TEST(msg_of([&] { call(*with_values, 0, p, qv, ov); }).find("key-only") != std::string::npos);
  mla_params odd = p;
  odd.rope_dims = 7;
  BOOST_TEST(msg_of([&] { call(*fx.kv, 0, odd, qv, ov); }).find("mla_attention: p.rope_dims") !=
             std::string::npos);
  BOOST_TEST(msg_of([&] {
               call(*fx.kv, 0, p, view(q, {2, c.heads * qd - 4}), ov);
             }).find("mla_attention: q") != std::string::npos);
  BOOST_TEST(msg_of([&] {
               call(*fx.kv, 0, p, qv, view(out, {1, c.heads, c.v}));
             }).find("mla_attention: out") != std::string::npos);
  std::vector<int32_t> sel(2 * 3);
  BOOST_CHECK_THROW(
      be.mla_attention(qv, view(a, {2, ad}), *fx.mw, *fx.kv, 0, b.batch, p, view(sel, {3, 2}), ov), error);
  // load_mla: the rows must be heads * (nope + v).
  BOOST_TEST(msg_of([&] { be.load_mla(fx.kvb.info, c.heads + 1, c.nope, c.v); }).find("load_mla: kv_b") !=
             std::string::npos);
  BOOST_CHECK_THROW(be.load_mla(fx.kvb.info, c.heads, c.nope, 0), error);
}

// ---- DSA indexer

namespace {

struct indexer_fixture {
  cpu::cpu_backend& be;
  int heads, d, rope, page_size;
  kv_layout layout;
  std::unique_ptr<kv_storage> kv;
  std::vector<std::vector<std::vector<float>>> hist;  // per sequence, per position: rot(k)

  indexer_fixture(cpu::cpu_backend& backend, int h, int dims, int rope_dims, int ps)
      : be(backend), heads(h), d(dims), rope(rope_dims), page_size(ps) {
    layout = {1, 32, ps, 1, dims, dtype::f32};
    layout.values = false;
    kv = be.alloc_kv(layout);
  }

  // Naive scores of row q (heads * d) at `pos` over the sequence's keys 0 ..= pos.
  std::vector<double> scores(const float* q, const float* w, int pos,
                             const std::vector<std::vector<float>>& h) const {
    std::vector<float> qr(q, q + heads * d);
    for (int i = 0; i < heads; ++i) rotate(qr.data() + i * d, rope, pos);
    std::vector<double> s;
    for (int t = 0; t <= pos; ++t) {
      double acc = 0.0;
      for (int i = 0; i < heads; ++i) {
        double dot = 0.0;
        for (int j = 0; j < d; ++j) dot += double{qr[i * d + j]} * h[t][j];
        acc += w[i] / std::sqrt(double(heads)) * std::max(0.0, dot / std::sqrt(double(d)));
      }
      s.push_back(acc);
    }
    return s;
  }

  // Runs the indexer; checks inputs unchanged, the cache, and the top-k against the naive
  // scores (exact order when `exact`, else the chosen positions' scores).
  void step(const std::vector<test::seq_spec>& seqs, std::vector<float> q, std::vector<float> k,
            std::vector<float> w, int top_k, bool exact, const std::string& what) {
    test::batch_builder b(seqs, page_size);
    const int64_t n = b.batch.n_tokens;
    std::vector<int32_t> topk(static_cast<size_t>(n * top_k), 12345);
    const auto q0 = q, k0 = k, w0 = w;
    be.dsa_indexer(view(q, {n, heads, d}), view(k, {n, d}), view(w, {n, heads}), *kv, 0, b.batch, rope, theta,
                   top_k, view(topk, {n, top_k}));
    BOOST_TEST((q == q0 && k == k0 && w == w0), what << ": an input was modified");
    const std::vector<row_pos> rows = rows_of(seqs);
    hist.resize(std::max(hist.size(), seqs.size()));
    for (int64_t r = 0; r < n; ++r) {
      auto& h = hist[rows[r].seq];
      h.resize(std::max<size_t>(h.size(), rows[r].pos + 1));
      h[rows[r].pos].assign(k.begin() + r * d, k.begin() + (r + 1) * d);
      rotate(h[rows[r].pos].data(), rope, rows[r].pos);
    }
    const ref::paged_kv pool = dynamic_cast<cpu::cpu_kv&>(*kv).layer(0);
    BOOST_TEST(pool.v == nullptr);
    for (int64_t r = 0; r < n; ++r) {
      const float* slot = pool.k + int64_t{b.slot_mapping[r]} * d;
      for (int j = 0; j < d; ++j) {
        if (!close(slot[j], hist[rows[r].seq][rows[r].pos][j], 1e-6)) {
          BOOST_ERROR(what << ": cache row " << r << " dim " << j << " differs");
          break;
        }
      }
    }
    for (int64_t r = 0; r < n; ++r) {
      const int pos = rows[r].pos;
      const std::vector<double> s =
          scores(q.data() + r * heads * d, w.data() + r * heads, pos, hist[rows[r].seq]);
      std::vector<int> order(s.size());
      for (size_t i = 0; i < order.size(); ++i) order[i] = static_cast<int>(i);
      std::stable_sort(order.begin(), order.end(), [&](int a, int c) { return s[a] > s[c]; });
      const int m = std::min(top_k, pos + 1);
      const int32_t* got = topk.data() + r * top_k;
      std::set<int> seen;
      for (int j = 0; j < top_k; ++j) {
        const std::string where = what + " (" + std::string(be.kernels().name) + "): row " +
                                  std::to_string(r) + " (pos " + std::to_string(pos) + ") entry " +
                                  std::to_string(j) + " = " + std::to_string(got[j]);
        if (j >= m) {
          if (got[j] != -1) BOOST_ERROR(where << ", expected -1 past the context");
          continue;
        }
        if (got[j] < 0 || got[j] > pos || !seen.insert(got[j]).second) {
          BOOST_ERROR(where << ": not a new causal position");
          continue;
        }
        if (exact ? got[j] != order[j] : !close(s[got[j]], s[order[j]], 1e-4)) {
          BOOST_ERROR(where << " (score " << s[got[j]] << "), expected " << order[j] << " (score "
                            << s[order[j]] << ")");
        }
      }
    }
  }

  void random_step(const std::vector<test::seq_spec>& seqs, int top_k, std::mt19937& rng,
                   const std::string& what) {
    const auto n = static_cast<int64_t>(rows_of(seqs).size());
    step(seqs, test::random_floats(rng, n * heads * d), test::random_floats(rng, n * d),
         test::random_floats(rng, n * heads), top_k, false, what);
  }
};

}  // namespace

BOOST_AUTO_TEST_CASE(dsa_indexer_matches_naive_scores) {
  std::mt19937 rng(51);
  for (auto& be : backends()) {
    for (int top_k : {3, 8, 40}) {
      indexer_fixture fx(*be, 4, 32, 8, 4);
      fx.random_step({{{5, 2}, 0, 7}, {{9}, 0, 3}}, top_k, rng, "step 1");
      fx.random_step({{{5, 2}, 7, 1}, {{9, 0, 11}, 3, 6}, {{17}, 0, 1}}, top_k, rng, "step 2");
      fx.random_step({{{5, 2, 3}, 8, 1}, {{9, 0, 11}, 9, 1}, {{17}, 1, 1}}, top_k, rng, "step 3");
    }
    // Decode over a long context: the few-rows path that splits keys into blocks.
    indexer_fixture fx(*be, 3, 16, 4, 16);
    std::vector<int32_t> pages(32);
    for (int i = 0; i < 32; ++i) pages[i] = (i * 7) % 32;
    fx.random_step({{pages, 0, 300}}, 16, rng, "prefill 300");
    fx.random_step({{pages, 300, 1}}, 16, rng, "decode");
    fx.random_step({{pages, 301, 1}, {{pages[31]}, 0, 1}}, 16, rng,
                   "decode + new");  // page 31: unused by the first
  }
}

BOOST_AUTO_TEST_CASE(dsa_indexer_breaks_ties_by_position_and_fills_minus_one) {
  std::mt19937 rng(52);
  for (auto& be : backends()) {
    const int heads = 3, d = 16, rope = 4, n = 9;
    indexer_fixture fx(*be, heads, d, rope, 4);
    // Keys depend on pos % 3 only, with their rotated dims zero: exact score ties.
    std::vector<std::vector<float>> base;
    for (int i = 0; i < 3; ++i) base.push_back(test::random_floats(rng, d));
    std::vector<float> k;
    for (int t = 0; t < n; ++t) {
      std::vector<float> row = base[t % 3];
      std::fill(row.begin(), row.begin() + rope, 0.0f);
      k.insert(k.end(), row.begin(), row.end());
    }
    auto w = test::random_floats(rng, n * heads);
    for (float& x : w) x = std::fabs(x) + 0.1f;
    fx.step({{{3, 0, 6}, 0, n}}, test::random_floats(rng, n * heads * d), k, w, 5, true, "ties");
    // A short context with a large top_k: all causal positions, then -1.
    indexer_fixture short_fx(*be, heads, d, rope, 4);
    short_fx.step({{{1}, 0, 3}}, test::random_floats(rng, 3 * heads * d), test::random_floats(rng, 3 * d),
                  test::random_floats(rng, 3 * heads), 6, false, "short context");
  }
  // Hand-checked: identical keys everywhere -> positions in order, then -1.
  cpu::cpu_backend be({2, 64, nullptr});
  indexer_fixture fx(be, 2, 8, 2, 4);
  std::vector<float> k(5 * 8, 0.5f), q(5 * 2 * 8, 1.0f), w(5 * 2, 1.0f);
  test::batch_builder b({{{0, 1}, 0, 5}}, 4);
  std::vector<int32_t> topk(5 * 4);
  be.dsa_indexer(view(q, {5, 2, 8}), view(k, {5, 8}), view(w, {5, 2}), *fx.kv, 0, b.batch, 0, theta, 4,
                 view(topk, {5, 4}));
  const std::vector<int32_t> want{0, -1, -1, -1, 0, 1, -1, -1, 0, 1, 2, -1, 0, 1, 2, 3, 0, 1, 2, 3};
  BOOST_TEST(topk == want, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(dsa_indexer_rejects_bad_arguments) {
  cpu::cpu_backend be({1, 64, nullptr});
  indexer_fixture fx(be, 2, 8, 2, 4);
  test::batch_builder b({{{0}, 0, 2}}, 4);
  std::vector<float> q(2 * 2 * 8), k(2 * 8), w(2 * 2);
  std::vector<int32_t> topk(2 * 4);
  auto msg = [&](int rope, int top_k, tensor_view kv_k, tensor_view tk) -> std::string {
    try {
      be.dsa_indexer(view(q, {2, 2, 8}), kv_k, view(w, {2, 2}), *fx.kv, 0, b.batch, rope, theta, top_k, tk);
    } catch (const error& e) {
      return e.what();
    }
    return "";
  };
  BOOST_TEST(msg(2, 4, view(k, {2, 8}), view(topk, {2, 4})) == "");
  BOOST_TEST(msg(3, 4, view(k, {2, 8}), view(topk, {2, 4})).find("dsa_indexer: rope_dims") !=
             std::string::npos);
  BOOST_TEST(msg(2, 0, view(k, {2, 8}), view(topk, {2, 4})).find("dsa_indexer: top_k") != std::string::npos);
  BOOST_TEST(msg(2, 4, view(k, {2, 8}), view(topk, {2, 2, 2})).find("dsa_indexer: topk") !=
             std::string::npos);
  BOOST_TEST(msg(2, 2, view(k, {2, 8}), view(topk, {2, 4})).find("dsa_indexer: topk") != std::string::npos);
  BOOST_TEST(msg(2, 4, view(k, {1, 16}), view(topk, {2, 4})).find("dsa_indexer: k") != std::string::npos);
}
