#define BOOST_TEST_MODULE ref_ops
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <vector>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"
#include "tandem_ref/attention.hpp"
#include "tandem_ref/ops.hpp"
#include "test_util.hpp"

// The reference ops against cases small enough to compute by hand.
using namespace tandem;
namespace tt = boost::test_tools;

BOOST_AUTO_TEST_CASE(rms_norm_of_constant_vector_is_weight_times_sign) {
  const std::vector<float> x(8, 3.0f), w{1, 2, 3, 4, 5, 6, 7, 8};
  std::vector<float> out(8);
  ref::rms_norm(x.data(), w.data(), 0.0f, 1, 8, out.data());
  for (int j = 0; j < 8; ++j) BOOST_TEST(out[j] == w[j], tt::tolerance(1e-6f));
  // eps enters under the root: 3 / sqrt(9 + 7) = 0.75.
  ref::rms_norm(x.data(), w.data(), 7.0f, 1, 8, out.data());
  BOOST_TEST(out[1] == 1.5f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(add_rms_norm_updates_residual) {
  std::vector<float> res{1, -1}, x{1, 1}, w{1, 1}, out(2);
  ref::add_rms_norm(res.data(), x.data(), w.data(), 0.0f, 1, 2, out.data());
  BOOST_TEST(res[0] == 2.0f);
  BOOST_TEST(res[1] == 0.0f);
  BOOST_TEST(out[0] == std::sqrt(2.0f), tt::tolerance(1e-6f));  // 2 / sqrt(4 / 2)
  BOOST_TEST(out[1] == 0.0f);
}

BOOST_AUTO_TEST_CASE(linear_f32_by_hand) {
  const std::vector<float> w{1, 2, 3, 0, -1, 0.5f};  // {2 out, 3 in}
  const std::vector<float> x{1, 1, 1, 2, 0, -2};    // 2 rows
  std::vector<float> y(4);
  ref::linear(dtype::f32, w.data(), 2, 3, x.data(), 2, y.data());
  BOOST_TEST(y == (std::vector<float>{6, -0.5f, -4, -1}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(linear_q4_1_block_by_hand) {
  block_q4_1 b{};
  b.d = fp32_to_fp16(0.5f);
  b.m = fp32_to_fp16(-1.0f);
  b.qs[0] = 0x3 | (0xf << 4);  // element 0 = 3 (low), element 16 = 15 (high)
  std::vector<float> x(32, 0.0f);
  x[0] = 1.0f;
  x[16] = 2.0f;
  x[1] = 4.0f;  // element 1 has q = 0 -> value m = -1
  float y = 0;
  ref::linear(dtype::q4_1, &b, 1, 32, x.data(), 1, &y);
  // (0.5 * 3 - 1) * 1 + (0.5 * 15 - 1) * 2 + (-1) * 4
  BOOST_TEST(y == 0.5f + 13.0f - 4.0f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(linear_q8_0_and_q4_0_blocks_by_hand) {
  block_q8_0 b8{};
  b8.d = fp32_to_fp16(0.25f);
  for (int j = 0; j < 32; ++j) b8.qs[j] = static_cast<int8_t>(j - 16);
  block_q4_0 b4{};
  b4.d = fp32_to_fp16(2.0f);
  for (auto& q : b4.qs) q = 0x88;  // every element q = 8 -> value 0
  b4.qs[5] = 0x8a;                 // element 5 = (10 - 8) * 2 = 4
  const std::vector<float> x(32, 1.0f);
  float y = 0;
  ref::linear(dtype::q8_0, &b8, 1, 32, x.data(), 1, &y);
  BOOST_TEST(y == 0.25f * -16.0f, tt::tolerance(1e-6f));  // sum of j - 16 over 0..31 = -16
  ref::linear(dtype::q4_0, &b4, 1, 32, x.data(), 1, &y);
  BOOST_TEST(y == 4.0f, tt::tolerance(1e-6f));
}

BOOST_AUTO_TEST_CASE(embed_copies_rows_and_rejects_bad_ids) {
  const std::vector<float> table{0, 1, 10, 11, 20, 21};
  std::vector<int32_t> ids{2, 0};
  std::vector<float> out(4);
  ref::embed(dtype::f32, table.data(), 3, 2, ids.data(), 2, out.data());
  BOOST_TEST(out == (std::vector<float>{20, 21, 0, 1}), tt::per_element());
  ids[1] = 3;
  BOOST_CHECK_THROW(ref::embed(dtype::f32, table.data(), 3, 2, ids.data(), 2, out.data()), error);
}

BOOST_AUTO_TEST_CASE(rope_position_zero_is_identity_and_pairs_rotate) {
  std::vector<float> x{1, 2, 3, 4}, orig = x;
  std::vector<int32_t> pos{0};
  ref::rope(x.data(), 1, 1, 4, pos.data(), {10000.0f, 0, false});
  BOOST_TEST(x == orig, tt::per_element());
  // Pair 0 has frequency 1: at position 1 it turns by exactly 1 radian.
  pos[0] = 1;
  ref::rope(x.data(), 1, 1, 4, pos.data(), {10000.0f, 0, false});
  BOOST_TEST(x[0] == std::cos(1.0f) - 2 * std::sin(1.0f), tt::tolerance(1e-6f));
  BOOST_TEST(x[1] == std::sin(1.0f) + 2 * std::cos(1.0f), tt::tolerance(1e-6f));
  // Pair 1 of 4 dims: frequency theta^(-1/2) = 0.01 for theta 10000.
  BOOST_TEST(x[2] == 3 * std::cos(0.01f) - 4 * std::sin(0.01f), tt::tolerance(1e-6f));
  // neox pairs element 0 with element 2; rotary_dims 2 leaves dims 2, 3 alone.
  std::vector<float> y{1, 2, 3, 4};
  ref::rope(y.data(), 1, 1, 4, pos.data(), {10000.0f, 0, true});
  BOOST_TEST(y[0] == std::cos(1.0f) - 3 * std::sin(1.0f), tt::tolerance(1e-6f));
  std::vector<float> z{1, 2, 3, 4};
  ref::rope(z.data(), 1, 1, 4, pos.data(), {10000.0f, 2, false});
  BOOST_TEST(z[2] == 3.0f);
  BOOST_TEST(z[3] == 4.0f);
}

BOOST_AUTO_TEST_CASE(silu_mul_add_gather_by_hand) {
  const std::vector<float> g{0.0f, 1.0f}, u{5.0f, 2.0f};
  std::vector<float> out(2);
  ref::silu_mul(g.data(), u.data(), 2, out.data());
  BOOST_TEST(out[0] == 0.0f);
  BOOST_TEST(out[1] == 2.0f / (1.0f + std::exp(-1.0f)), tt::tolerance(1e-6f));
  ref::add(g.data(), u.data(), 2, out.data());
  BOOST_TEST(out == (std::vector<float>{5, 3}), tt::per_element());
  const std::vector<float> x{1, 2, 3, 4, 5, 6};
  std::vector<int32_t> rows{2, 2, 0};
  std::vector<float> gathered(6);
  ref::gather_rows(x.data(), 3, 2, rows.data(), 3, gathered.data());
  BOOST_TEST(gathered == (std::vector<float>{5, 6, 5, 6, 1, 2}), tt::per_element());
  rows[0] = -1;
  BOOST_CHECK_THROW(ref::gather_rows(x.data(), 3, 2, rows.data(), 3, gathered.data()), error);
}

namespace {
// One KV head of dim 2, pages of 2 slots, a pool of 4 pages.
struct tiny_pool {
  std::vector<float> k = std::vector<float>(16, 0.0f), v = std::vector<float>(16, 0.0f);
  ref::paged_kv kv{k.data(), v.data(), 4, 2, 1, 2};
};
}  // namespace

BOOST_AUTO_TEST_CASE(attention_over_one_key_returns_its_value) {
  tiny_pool p;
  test::batch_builder b({{{3}, 0, 1}}, 2);
  std::vector<float> q{0.3f, -7.0f}, k{1, 2}, v{5, -6}, out(2);
  ref::attention(q.data(), k.data(), v.data(), 1, p.kv, b.batch, 1.0f, out.data());
  BOOST_TEST(out == v, tt::per_element());
  BOOST_TEST(p.k[3 * 2 * 2] == 1.0f);  // page 3, slot 0
}

BOOST_AUTO_TEST_CASE(attention_is_causal_and_averages_equal_scores) {
  tiny_pool p;
  // Three new tokens over pages {2, 0}: the third sits on the second page.
  test::batch_builder b({{{2, 0}, 0, 3}}, 2);
  std::vector<float> q(6, 0.0f), k{1, 0, 0, 1, 1, 1}, v{2, 0, 4, 2, 0, 10}, out(6);
  // With q = 0 every visible key scores the same: row r averages v[0..r].
  ref::attention(q.data(), k.data(), v.data(), 1, p.kv, b.batch, 1.0f, out.data());
  BOOST_TEST(out == (std::vector<float>{2, 0, 3, 1, 2, 4}), tt::tolerance(1e-6f) << tt::per_element());
  BOOST_TEST(p.v[0 * 4 + 0] == 0.0f);  // third token: page 0 slot 0 holds v = {0, 10}
  BOOST_TEST(p.v[0 * 4 + 1] == 10.0f);
}

BOOST_AUTO_TEST_CASE(attention_gqa_maps_query_heads_to_kv_heads) {
  // 2 KV heads, 4 query heads: heads 0-1 read KV head 0, heads 2-3 read KV head 1.
  std::vector<float> kp(2 * 2 * 2, 0.0f), vp(kp.size(), 0.0f);
  ref::paged_kv kv{kp.data(), vp.data(), 2, 1, 2, 2};
  test::batch_builder b({{{1}, 0, 1}}, 1);
  std::vector<float> q(8, 1.0f), k{1, 1, 1, 1}, v{1, 2, 3, 4}, out(8);
  ref::attention(q.data(), k.data(), v.data(), 4, kv, b.batch, 1.0f, out.data());
  BOOST_TEST(out == (std::vector<float>{1, 2, 1, 2, 3, 4, 3, 4}), tt::per_element());
}

BOOST_AUTO_TEST_CASE(check_batch_rejects_bad_indices) {
  tiny_pool p;
  test::batch_builder b({{{7}, 0, 1}}, 2);  // page 7 is outside a 4-page pool
  BOOST_CHECK_THROW(ref::check_batch(b.batch, p.kv, 1), error);
  test::batch_builder ok({{{1}, 0, 1}}, 2);
  ok.slot_mapping[0] = 5;  // disagrees with its page table
  BOOST_CHECK_THROW(ref::check_batch(ok.batch, p.kv, 1), error);
  ok.slot_mapping[0] = 2;
  BOOST_CHECK_NO_THROW(ref::check_batch(ok.batch, p.kv, 1));
  BOOST_CHECK_THROW(ref::check_batch(ok.batch, p.kv, 0), error);
}
