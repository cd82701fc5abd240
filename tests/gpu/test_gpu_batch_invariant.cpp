#define BOOST_TEST_MODULE gpu_batch_invariant
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// backend.cuda's batch_invariant mode: a row's result must not depend on the rows it is
// computed with. Each op runs once per row alone, then on steps of many rows (the sizes a
// decode batch, a verify step of 1 + k rows per sequence and a prompt chunk take), and every
// row must equal its lone run bit for bit (memcmp, not a tolerance). The default mode is run
// on the same inputs and how many rows differ there is printed: it shows the test can tell.
#include <cstring>
#include <random>
#include <string>

#include "cuda_backend.hpp"
#include "cuda_weights.hpp"
#include "gpu_util.hpp"
#include "test_util.hpp"

using namespace tandem;
using test::dvec;
using kind = linear_prologue::kind;

namespace {

cuda::cuda_backend& invariant() {
  static cuda::cuda_backend be({.batch_invariant = true});
  return be;
}

cuda::cuda_backend& plain() {
  static cuda::cuda_backend be;
  return be;
}

std::mt19937& rng() {
  static std::mt19937 r(4242);
  return r;
}

// Rows of `got` [n, width] that are not bit-identical to the lone runs' rows in `alone`.
int differing_rows(const std::vector<float>& got, const std::vector<float>& alone, int64_t n, int64_t width) {
  int bad = 0;
  for (int64_t r = 0; r < n; ++r)
    if (std::memcmp(got.data() + r * width, alone.data() + r * width, static_cast<size_t>(width) * 4) != 0) ++bad;
  return bad;
}

// y = prologue(x) W^T (+ y0 when acc) on `be`, for rows [0, n) of x.
std::vector<float> run_linear(cuda::cuda_backend& be, const linear_weight& w, const std::vector<float>& x,
                              const std::vector<float>& up, const std::vector<float>& norm,
                              const std::vector<float>& y0, int64_t n, kind k, bool acc) {
  const int64_t in = w.in_features(), out = w.out_features();
  dvec<float> dx(be, std::vector<float>(x.begin(), x.begin() + n * in));
  dvec<float> dup(be, std::vector<float>(up.begin(), up.begin() + n * in));
  dvec<float> dn(be, norm);
  dvec<float> dy(be, std::vector<float>(y0.begin(), y0.begin() + n * out));
  linear_prologue pro;
  pro.k = k;
  if (k == kind::rms_norm) pro.norm_weight = dn.view({in}), pro.eps = 1e-5f;
  if (k == kind::silu_mul) pro.up = dup.view({n, in});
  if (k == kind::none && !acc) be.linear(w, dx.view({n, in}), dy.view({n, out}));
  else be.linear_fused(w, dx.view({n, in}), pro, dy.view({n, out}), acc);
  return dy.host();
}

void check_linear_rows(const std::vector<test::test_weight>& parts, kind k, bool acc, const std::string& what) {
  const int64_t max_rows = 72;  // past the GEMV's 32 rows a launch, and 8 sequences x (1 + 8)
  const int64_t in = parts[0].info.shape[1];
  for (cuda::cuda_backend* be : {&invariant(), &plain()}) {
    std::unique_ptr<linear_weight> w;
    if (parts.size() == 1) {
      w = be->load_linear(parts[0].info);
    } else {
      std::vector<const tensor_info*> infos;
      for (const auto& p : parts) infos.push_back(&p.info);
      w = be->load_linear_group(infos);
    }
    const int64_t out = w->out_features();
    std::mt19937 local(static_cast<unsigned>(in * 31 + out));  // the same inputs on both backends
    const auto x = test::random_floats(local, max_rows * in, 2.0f), up = test::random_floats(local, max_rows * in),
               norm = test::random_floats(local, in), y0 = test::random_floats(local, max_rows * out);
    // Each row alone. A grouped weight's output is segment-major ([segment][n][rows]), so a
    // row's values are gathered segment by segment.
    auto seg_rows = [&](const std::vector<float>& y, int64_t n, int64_t r) {
      std::vector<float> row;
      int64_t start = 0;
      for (const auto& p : parts) {
        const int64_t rows = p.info.shape[0];
        row.insert(row.end(), y.begin() + n * start + r * rows, y.begin() + n * start + (r + 1) * rows);
        start += rows;
      }
      return row;
    };
    std::vector<float> alone;
    for (int64_t r = 0; r < max_rows; ++r) {
      const std::vector<float> xr(x.begin() + r * in, x.begin() + (r + 1) * in),
          ur(up.begin() + r * in, up.begin() + (r + 1) * in), yr(y0.begin() + r * out, y0.begin() + (r + 1) * out);
      const auto row = seg_rows(run_linear(*be, *w, xr, ur, norm, yr, 1, k, acc), 1, 0);
      alone.insert(alone.end(), row.begin(), row.end());
    }
    for (int64_t n : {2, 4, 5, 8, 9, 16, 33, 40, 72}) {
      const auto y = run_linear(*be, *w, x, up, norm, y0, n, k, acc);
      std::vector<float> got;
      for (int64_t r = 0; r < n; ++r) {
        const auto row = seg_rows(y, n, r);
        got.insert(got.end(), row.begin(), row.end());
      }
      const int bad = differing_rows(got, alone, n, out);
      if (be == &invariant()) {
        BOOST_TEST(bad == 0, what << ", " << n << " rows: " << bad << " rows differ from their lone runs");
      } else if (bad > 0) {
        BOOST_TEST_MESSAGE(what << ", " << n << " rows, default mode: " << bad << " rows differ (expected there)");
      }
    }
  }
}

std::vector<test::test_weight> weights(std::initializer_list<std::pair<dtype, std::pair<int64_t, int64_t>>> specs) {
  std::vector<test::test_weight> v;
  for (const auto& [t, shape] : specs) v.push_back(test::random_weight(rng(), t, shape.first, shape.second));
  return v;
}

}  // namespace

// The default model's linears (SmolLM2-135M: hidden 576, ffn 1536, q/k/v 576/192/192, a
// tied Q8_0 head of 49152 rows), each with the prologue and add the fused layer uses.
BOOST_AUTO_TEST_CASE(linear_rows_do_not_depend_on_the_step) {
  const auto qkv = weights({{dtype::q4_1, {576, 576}}, {dtype::q4_1, {192, 576}}, {dtype::q4_1, {192, 576}}});
  check_linear_rows(qkv, kind::rms_norm, false, "q/k/v group with the pre-norm");
  check_linear_rows(qkv, kind::none, false, "q/k/v group");
  const auto wo = weights({{dtype::q4_1, {576, 576}}});
  check_linear_rows(wo, kind::none, true, "o projection into the residual");
  const auto down = weights({{dtype::q4_1, {576, 1536}}});
  check_linear_rows(down, kind::silu_mul, true, "gated down projection into the residual");
  const auto head = weights({{dtype::q8_0, {49152, 576}}});
  check_linear_rows(head, kind::none, false, "LM head");
}

namespace {

// Attention output of query row `row` of sequence 0, in a step made of `seqs` (sequence 0
// first), on `be` with RoPE inside attention (the engine's path) over a bf16 pool holding
// `kpool` / `vpool`. q, k, v hold the step's rows.
std::vector<float> attend(cuda::cuda_backend& be, const std::vector<test::seq_spec>& seqs, int64_t row,
                          const std::vector<uint8_t>& kpool, const std::vector<uint8_t>& vpool, int64_t n_pages,
                          const std::vector<float>& q, const std::vector<float>& k, const std::vector<float>& v) {
  constexpr int heads = 9, kv_heads = 3, hd = 64, page = 16;
  test::batch_builder bb(seqs, page);
  const int64_t n = bb.batch.n_tokens;
  kv_layout lay{1, n_pages, page, kv_heads, hd, dtype::bf16};
  auto kv = be.alloc_kv(lay);
  const cuda::dev_kv pool = dynamic_cast<cuda::cuda_kv&>(*kv).layer(0);
  be.copy_to_device(pool.k, kpool.data(), kpool.size());
  be.copy_to_device(pool.v, vpool.data(), vpool.size());
  dvec<int32_t> qs(be, bb.query_start), sl(be, bb.seq_lens), pt(be, bb.page_table), sm(be, bb.slot_mapping),
      ps(be, bb.positions);
  attention_batch b = bb.batch;
  const int64_t ns = b.n_seqs;
  b.query_start = qs.view({ns + 1});
  b.seq_lens = sl.view({ns});
  b.page_table = pt.view({ns, b.max_pages_per_seq});
  b.slot_mapping = sm.view({n});
  b.positions = ps.view({n});
  const rope_params rope{100000.0f, 0, false};
  b.rope = &rope;
  dvec<float> dq(be, std::vector<float>(q.begin(), q.begin() + n * heads * hd)),
      dk(be, std::vector<float>(k.begin(), k.begin() + n * kv_heads * hd)),
      dv(be, std::vector<float>(v.begin(), v.begin() + n * kv_heads * hd)), out(be, n * heads * hd);
  be.attention(dq.view({n, heads, hd}), dk.view({n, kv_heads, hd}), dv.view({n, kv_heads, hd}), *kv, 0, b,
               0.125f, out.view({n, heads, hd}));
  const std::vector<float> all = out.host();
  return std::vector<float>(all.begin() + row * heads * hd, all.begin() + (row + 1) * heads * hd);
}

}  // namespace

// Sequence 0 has `ctx` cached tokens and decodes position ctx. Its query row must give the
// same output alone (a decode step), beside other decoding sequences (a batch), as the first
// row of a 1 + k verify block, and inside a prompt chunk that reaches past it, on cached
// contexts of 1 to 3000 tokens.
BOOST_AUTO_TEST_CASE(attention_rows_do_not_depend_on_the_step) {
  constexpr int heads = 9, kv_heads = 3, hd = 64, page = 16;
  const int64_t n_pages = 600;
  std::vector<int32_t> pages0(220), pages1(60), pages2(60);
  for (int i = 0; i < 220; ++i) pages0[i] = (i * 7) % 220;  // out of order, as the pool hands them out
  for (int i = 0; i < 60; ++i) pages1[i] = 220 + i, pages2[i] = 280 + (i * 11) % 60;
  const int64_t slots = n_pages * page, ts = int64_t{kv_heads} * hd;
  auto bf16_bytes = [&](std::mt19937& r) {
    const auto f = test::random_floats(r, slots * ts);
    std::vector<uint8_t> b(f.size() * 2);
    for (size_t i = 0; i < f.size(); ++i) {
      const uint16_t h = fp32_to_bf16(f[i]);
      std::memcpy(b.data() + 2 * i, &h, 2);
    }
    return b;
  };
  for (int ctx : {1, 15, 16, 100, 777, 3000}) {
    std::mt19937 local(static_cast<unsigned>(ctx));
    const auto kpool = bf16_bytes(local), vpool = bf16_bytes(local);
    const int64_t max_rows = 200;
    const auto q = test::random_floats(local, max_rows * heads * hd), k = test::random_floats(local, max_rows * ts),
               v = test::random_floats(local, max_rows * ts);
    for (cuda::cuda_backend* be : {&invariant(), &plain()}) {
      const auto alone = attend(*be, {{pages0, ctx, 1}}, 0, kpool, vpool, n_pages, q, k, v);
      struct variant {
        const char* what;
        std::vector<test::seq_spec> seqs;
      };
      const std::vector<variant> steps = {
          {"decode batch of 3", {{pages0, ctx, 1}, {pages1, 40, 1}, {pages2, 500, 1}}},
          {"verify block of 1 + 4", {{pages0, ctx, 5}}},
          {"verify blocks of 1 + 7 beside another", {{pages0, ctx, 8}, {pages1, 40, 8}}},
          {"prompt chunk of 150", {{pages0, ctx, 150}}},
      };
      for (const variant& s : steps) {
        const auto got = attend(*be, s.seqs, 0, kpool, vpool, n_pages, q, k, v);
        const int bad = differing_rows(got, alone, 1, heads * hd);
        if (be == &invariant()) {
          BOOST_TEST(bad == 0, "context " << ctx << ", " << s.what << ": the row differs from its lone decode");
        } else if (bad > 0) {
          BOOST_TEST_MESSAGE("context " << ctx << ", " << s.what << ", default mode: differs (expected there)");
        }
      }
    }
  }
}

// What the mode does not cover is refused when the weights load, not at the first request.
BOOST_AUTO_TEST_CASE(ops_outside_the_mode_are_refused) {
  BOOST_TEST(invariant().supports(backend_op::linear));
  BOOST_TEST(invariant().supports(backend_op::attention_gqa));
  BOOST_TEST(!invariant().supports(backend_op::moe_experts));
  BOOST_TEST(!invariant().supports(backend_op::attention_mla));
  BOOST_TEST(plain().supports(backend_op::attention_mla));
  BOOST_TEST(invariant().describe().find("batch-invariant") != std::string::npos);
}

TANDEM_GPU_TEST_MAIN
