#define BOOST_TEST_MODULE cpu_attention
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_weights.hpp"
#include "tandem/error.hpp"
#include "tandem_ref/attention.hpp"
#include "test_util.hpp"

// backend.cpu paged attention against ref::attention over several steps: prefill chunks
// that cross page boundaries, decode tokens and new prompts mixed in one batch, GQA 9/3
// heads of dim 64. The two keep separate pools and must agree on outputs and pool contents.
// Tolerance: scores and weighted sums differ only in summation order (dots of 64 terms,
// sums over <= 100 keys), far below 2e-5 relative.
using namespace tandem;
using test::view;

namespace {

constexpr int n_heads = 9, n_kv = 3, hd = 64;

struct pair_of_pools {
  kv_layout layout;
  std::unique_ptr<kv_storage> kv;
  std::vector<float> ref_k, ref_v;
  ref::paged_kv ref_pool;

  pair_of_pools(cpu::cpu_backend& be, int n_pages, int page_size) {
    layout = {2, n_pages, page_size, n_kv, hd, dtype::f32};
    kv = be.alloc_kv(layout);
    const size_t n = static_cast<size_t>(n_pages) * page_size * n_kv * hd;
    ref_k.assign(n, 0.0f);
    ref_v.assign(n, 0.0f);
    ref_pool = {ref_k.data(), ref_v.data(), n_pages, page_size, n_kv, hd};
  }
};

void run_step(cpu::cpu_backend& be, pair_of_pools& p, const std::vector<test::seq_spec>& seqs,
              std::mt19937& rng, const std::string& what) {
  test::batch_builder b(seqs, p.layout.page_size);
  const int64_t n = b.batch.n_tokens;
  auto q = test::random_floats(rng, n * n_heads * hd), k = test::random_floats(rng, n * n_kv * hd);
  auto v = test::random_floats(rng, n * n_kv * hd);
  std::vector<float> out(q.size()), ref_out(q.size());
  const float scale = 1.0f / 8.0f;
  be.attention(view(q, {n, n_heads, hd}), view(k, {n, n_kv, hd}), view(v, {n, n_kv, hd}), *p.kv, 1,
               b.batch, scale, view(out, {n, n_heads, hd}));
  ref::attention(q.data(), k.data(), v.data(), n_heads, p.ref_pool, b.batch, scale, ref_out.data());
  for (size_t i = 0; i < out.size(); ++i) {
    if (std::fabs(out[i] - ref_out[i]) > 2e-5 * (1.0 + std::fabs(ref_out[i]))) {
      BOOST_ERROR(what + " (" + std::string(be.kernels().name) + "): element " + std::to_string(i) +
                  " is " + std::to_string(out[i]) + ", reference " + std::to_string(ref_out[i]));
      return;
    }
  }
  const ref::paged_kv layer1 = dynamic_cast<cpu::cpu_kv&>(*p.kv).layer(1);
  BOOST_TEST(std::equal(p.ref_k.begin(), p.ref_k.end(), layer1.k));
  BOOST_TEST(std::equal(p.ref_v.begin(), p.ref_v.end(), layer1.v));
}

std::vector<std::unique_ptr<cpu::cpu_backend>> backends() {
  std::vector<std::unique_ptr<cpu::cpu_backend>> out;
  for (const char* name : {"scalar", "avx2", "avx512"}) {
    if (const auto* k = cpu::kernels_by_name(name)) {
      out.push_back(std::make_unique<cpu::cpu_backend>(cpu::cpu_options{2, 64, k}));
    }
  }
  return out;
}

}  // namespace

BOOST_AUTO_TEST_CASE(mixed_prefill_and_decode_over_pages) {
  std::mt19937 rng(31);
  for (auto& be : backends()) {
    pair_of_pools p(*be, 24, 4);
    // Step 1: A prefills 7 tokens over pages {5, 2}, B prefills 3 on page {9}.
    run_step(*be, p, {{{5, 2}, 0, 7}, {{9}, 0, 3}}, rng, "step 1");
    // Step 2: A decodes (its 8th token ends page 2), B prefills 6 more over {9, 0, 11},
    // C starts with a single-token prompt.
    run_step(*be, p, {{{5, 2}, 7, 1}, {{9, 0, 11}, 3, 6}, {{17}, 0, 1}}, rng, "step 2");
    // Step 3: all decode; A moves onto a new page.
    run_step(*be, p, {{{5, 2, 3}, 8, 1}, {{9, 0, 11}, 9, 1}, {{17}, 1, 1}}, rng, "step 3");
  }
}

BOOST_AUTO_TEST_CASE(long_prefill_then_decode_with_pages_of_16) {
  std::mt19937 rng(32);
  for (auto& be : backends()) {
    pair_of_pools p(*be, 16, 16);
    const std::vector<int32_t> pages{3, 14, 0, 7, 9, 1};
    run_step(*be, p, {{pages, 0, 50}}, rng, "prefill 50");
    run_step(*be, p, {{pages, 50, 33}}, rng, "chunk of 33");
    for (int t = 83; t < 86; ++t) run_step(*be, p, {{pages, t, 1}}, rng, "decode");
  }
}

BOOST_AUTO_TEST_CASE(bad_batches_are_rejected) {
  cpu::cpu_backend be({1, 64, nullptr});
  pair_of_pools p(be, 4, 4);
  test::batch_builder b({{{1}, 0, 2}}, 4);
  std::vector<float> q(2 * n_heads * hd), k(2 * n_kv * hd), v(k.size()), out(q.size());
  auto call = [&](int layer) {
    be.attention(view(q, {2, n_heads, hd}), view(k, {2, n_kv, hd}), view(v, {2, n_kv, hd}), *p.kv,
                 layer, b.batch, 0.125f, view(out, {2, n_heads, hd}));
  };
  BOOST_CHECK_NO_THROW(call(0));
  BOOST_CHECK_THROW(call(2), error);  // the pool has 2 layers
  b.page_table[0] = 4;                // outside the 4-page pool
  BOOST_CHECK_THROW(call(0), error);
  b.page_table[0] = 1;
  b.seq_lens[0] = 1;  // fewer tokens than it brings
  BOOST_CHECK_THROW(call(0), error);
}
