#define BOOST_TEST_MODULE small_ops
#include <boost/test/unit_test.hpp>
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "tandem/error.hpp"
#include "test_util.hpp"

// The backend's small ops (attention_full, dynamic_conv, top_k) as every backend inherits
// them (the host defaults; backend.cpu runs them), against naive long-double formulations
// written from the header's definitions, their edge cases, and their errors. The gpu suite
// compares backend.cuda's kernels with these.
using namespace tandem;
using test::view;

namespace {

cpu::cpu_backend& host() {
  static cpu::cpu_backend be({2, 64, nullptr});
  return be;
}

tensor_view view3(std::vector<float>& v, int64_t a, int64_t b, int64_t c) {
  return tensor_view::contiguous(v.data(), dtype::f32, {a, b, c});
}

template <class F>
std::string message_of(F&& f) {
  try {
    f();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(attention_full_matches_naive) {
  std::mt19937 rng(5);
  struct shape {
    int64_t n, heads, kv_heads, D, m;
  };
  for (const shape s : {shape{8, 9, 3, 64, 1}, shape{8, 9, 3, 64, 300}, shape{1, 4, 4, 16, 7}, shape{3, 8, 1, 32, 50}}) {
    std::vector<float> q = test::random_floats(rng, s.n * s.heads * s.D, 2.0f);
    std::vector<float> k = test::random_floats(rng, s.m * s.kv_heads * s.D, 2.0f);
    std::vector<float> v = test::random_floats(rng, s.m * s.kv_heads * s.D);
    std::vector<float> out(q.size(), -7.0f);  // the op overwrites, never accumulates
    const float scale = 1.0f / std::sqrt(static_cast<float>(s.D));
    host().attention_full(view3(q, s.n, s.heads, s.D), view3(k, s.m, s.kv_heads, s.D), view3(v, s.m, s.kv_heads, s.D),
                         scale, view3(out, s.n, s.heads, s.D));
    double worst = 0;
    for (int64_t r = 0; r < s.n; ++r)
      for (int64_t h = 0; h < s.heads; ++h) {
        const int64_t kh = h / (s.heads / s.kv_heads);
        std::vector<long double> w(static_cast<size_t>(s.m));
        long double top = -INFINITY, sum = 0;
        for (int64_t j = 0; j < s.m; ++j) {
          long double dot = 0;
          for (int64_t c = 0; c < s.D; ++c)
            dot += static_cast<long double>(q[(r * s.heads + h) * s.D + c]) * k[(j * s.kv_heads + kh) * s.D + c];
          w[static_cast<size_t>(j)] = dot * scale;
          top = std::max(top, w[static_cast<size_t>(j)]);
        }
        for (auto& x : w) sum += x = std::exp(x - top);
        for (int64_t c = 0; c < s.D; ++c) {
          long double want = 0;
          for (int64_t j = 0; j < s.m; ++j) want += w[static_cast<size_t>(j)] / sum * v[(j * s.kv_heads + kh) * s.D + c];
          worst = std::max(worst, static_cast<double>(std::fabs(out[(r * s.heads + h) * s.D + c] - want)));
        }
      }
    BOOST_TEST_CONTEXT("n " << s.n << " heads " << s.heads << "/" << s.kv_heads << " D " << s.D << " m " << s.m) {
      BOOST_TEST(worst < 2e-5);
    }
  }
}

BOOST_AUTO_TEST_CASE(attention_full_with_one_key_returns_its_value) {
  std::vector<float> q = {1, 2, 3, 4}, k = {5, 6, 7, 8}, v = {0.5f, -1, 2, 9}, out(4);
  host().attention_full(view3(q, 1, 2, 2), view3(k, 1, 2, 2), view3(v, 1, 2, 2), 10.0f, view3(out, 1, 2, 2));
  BOOST_TEST(out == v, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(dynamic_conv_matches_naive) {
  std::mt19937 rng(9);
  for (const auto [n, d, groups] : {std::array<int64_t, 3>{8, 576, 36}, {1, 64, 4}, {5, 12, 12}}) {
    std::vector<float> x = test::random_floats(rng, n * d), taps = test::random_floats(rng, n * 2 * groups);
    std::vector<float> base = test::random_floats(rng, 2 * groups), out(static_cast<size_t>(n * d));
    host().dynamic_conv(view(x, {n, d}), view(taps, {n, 2 * groups}), view(base, {groups, 2}), view(out, {n, d}));
    const int64_t size = d / groups;
    for (int64_t r = 0; r < n; ++r)
      for (int64_t c = 0; c < d; ++c) {
        const int64_t g = c / size;
        const float w0 = base[2 * g] + taps[r * 2 * groups + 2 * g], w1 = base[2 * g + 1] + taps[r * 2 * groups + 2 * g + 1];
        const float want = w0 * x[r * d + c] + (r > 0 ? w1 * x[(r - 1) * d + c] : 0.0f);
        if (out[r * d + c] != want) {
          BOOST_ERROR("n " << n << " d " << d << " row " << r << " col " << c << ": " << out[r * d + c] << ", want " << want);
          return;
        }
      }
  }
  // base [1, 0] with zero taps is the identity.
  std::vector<float> x = {1, 2, 3, 4, 5, 6}, taps(4, 0.0f), base = {1, 0}, out(6);
  host().dynamic_conv(view(x, {3, 2}), view(taps, {3, 2}), view(base, {1, 2}), view(out, {3, 2}));
  BOOST_TEST(out == x, boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(top_k_orders_ties_and_nan_as_specified) {
  const float nan = std::numeric_limits<float>::quiet_NaN(), inf = std::numeric_limits<float>::infinity();
  // Row 0: ties at 3 (columns 1, 4, 6) and a NaN that must rank with -inf, after every number.
  // Row 1: only NaN and -inf: lower columns first among equals.
  std::vector<float> x = {1, 3, nan, -inf, 3, 0, 3, 2,  //
                          nan, -inf, nan, -inf, nan, -inf, nan, -inf};
  std::vector<int32_t> ids(2 * 8);
  std::vector<float> values(2 * 8);
  host().top_k(view(x, {2, 8}), 8, view(ids, {2, 8}), view(values, {2, 8}));
  const std::vector<int32_t> want = {1, 4, 6, 7, 0, 5, 2, 3,  //
                                     0, 1, 2, 3, 4, 5, 6, 7};
  BOOST_TEST(ids == want, boost::test_tools::per_element());
  BOOST_TEST(values[0] == 3.0f);
  BOOST_TEST(std::isnan(values[6]));  // values keep the NaN
  BOOST_TEST(values[7] == -inf);

  std::vector<int32_t> one(2);
  std::vector<float> best(2);
  host().top_k(view(x, {2, 8}), 1, view(one, {2, 1}), view(best, {2, 1}));
  BOOST_TEST(one == (std::vector<int32_t>{1, 0}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(top_k_matches_a_stable_sort) {
  std::mt19937 rng(13);
  const int64_t n = 7, m = 49152;
  const int k = 16;
  std::vector<float> x = test::random_floats(rng, n * m, 4.0f);
  for (int64_t i = 0; i < n * m; i += 97) x[i] = std::round(x[i]);  // plenty of ties
  std::vector<int32_t> ids(n * k);
  std::vector<float> values(n * k);
  host().top_k(view(x, {n, m}), k, view(ids, {n, k}), view(values, {n, k}));
  for (int64_t r = 0; r < n; ++r) {
    std::vector<int32_t> order(m);
    std::iota(order.begin(), order.end(), 0);
    const float* row = x.data() + r * m;
    std::stable_sort(order.begin(), order.end(), [&](int32_t a, int32_t b) { return row[a] > row[b]; });
    for (int j = 0; j < k; ++j) {
      BOOST_TEST(ids[r * k + j] == order[j]);
      BOOST_TEST(values[r * k + j] == row[order[j]]);
    }
  }
}

BOOST_AUTO_TEST_CASE(bad_shapes_are_errors) {
  std::vector<float> a(64), b(64), c(64);
  std::vector<int32_t> i(64);
  BOOST_TEST(message_of([&] { host().top_k(view(a, {2, 8}), 9, view(i, {2, 9}), view(b, {2, 9})); }).find("k is 9") !=
             std::string::npos);
  BOOST_TEST(message_of([&] { host().top_k(view(a, {2, 8}), 4, view(i, {2, 3}), view(b, {2, 4})); }).find("ids and values") !=
             std::string::npos);
  BOOST_TEST(message_of([&] { host().attention_full(view3(a, 2, 4, 8), view3(b, 8, 3, 8), view3(c, 8, 3, 8), 1.0f,
                                                   view3(a, 2, 4, 8)); })
                 .find("multiple of kv_heads") != std::string::npos);
  BOOST_TEST(message_of([&] { host().attention_full(view3(a, 2, 4, 8), view3(b, 8, 2, 4), view3(c, 4, 2, 8), 1.0f,
                                                   view3(c, 2, 4, 8)); })
                 .find("k and v must") != std::string::npos);
  BOOST_TEST(message_of([&] { host().dynamic_conv(view(a, {4, 12}), view(b, {4, 6}), view(c, {3, 2}), view(a, {4, 12})); })
                 .find("alias") != std::string::npos);
  BOOST_TEST(message_of([&] { host().dynamic_conv(view(a, {4, 12}), view(b, {4, 6}), view(c, {2, 2}), view(c, {4, 12})); })
                 .find("base must be") != std::string::npos);
  BOOST_TEST(message_of([&] { host().dynamic_conv(view(a, {4, 16}), view(b, {4, 10}), view(c, {5, 2}), view(c, {4, 16})); })
                 .find("G dividing") != std::string::npos);
}
