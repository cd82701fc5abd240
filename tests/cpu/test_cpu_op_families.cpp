#define BOOST_TEST_MODULE cpu_op_families
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cpu_weights.hpp"
#include "tandem/error.hpp"
#include "test_util.hpp"

// backend.cpu answers supports() for every backend_op; layer_norm against a naive double
// formulation; key-only caches.
using namespace tandem;
using test::view;

BOOST_AUTO_TEST_CASE(cpu_supports_every_op) {
  cpu::cpu_backend be({1, 64, nullptr});
  const backend& base = be;
  for (int i = 0; i <= static_cast<int>(backend_op::top_k); ++i) {
    const auto op = static_cast<backend_op>(i);
    BOOST_TEST(base.supports(op), "backend.cpu does not support " << name(op));
  }
}

BOOST_AUTO_TEST_CASE(layer_norm_matches_naive) {
  std::mt19937 rng(71);
  for (int threads : {1, 2}) {
    cpu::cpu_backend be({threads, 64, nullptr});
    for (int64_t n : {1, 3, 40}) {
      for (int64_t d : {1, 7, 64, 1000}) {
        auto x = test::random_floats(rng, n * d, 3.0f);
        for (float& v : x) v += 5.0f;  // a mean far from zero
        auto w = test::random_floats(rng, d), b = test::random_floats(rng, d);
        std::vector<float> out(n * d);
        be.layer_norm(view(x, {n, d}), view(w, {d}), view(b, {d}), 1e-5f, view(out, {n, d}));
        for (int64_t i = 0; i < n; ++i) {
          double mean = 0.0, var = 0.0;
          for (int64_t j = 0; j < d; ++j) mean += x[i * d + j];
          mean /= d;
          for (int64_t j = 0; j < d; ++j) var += (x[i * d + j] - mean) * (x[i * d + j] - mean);
          var /= d;  // biased, as torch.nn.LayerNorm
          for (int64_t j = 0; j < d; ++j) {
            const double want = (x[i * d + j] - mean) / std::sqrt(var + 1e-5) * w[j] + b[j];
            if (std::fabs(out[i * d + j] - want) > 1e-4 * (1.0 + std::fabs(want))) {
              BOOST_ERROR("n " << n << " d " << d << " row " << i << " col " << j << ": " << out[i * d + j]
                               << ", naive " << want);
              break;
            }
          }
        }
        // In place gives the same.
        std::vector<float> y = x;
        be.layer_norm(view(y, {n, d}), view(w, {d}), view(b, {d}), 1e-5f, view(y, {n, d}));
        BOOST_TEST(y == out, boost::test_tools::per_element());
      }
    }
  }
  cpu::cpu_backend be({1, 64, nullptr});
  std::vector<float> x(8), w(4), b(3), out(8);
  try {
    be.layer_norm(view(x, {2, 4}), view(w, {4}), view(b, {3}), 1e-5f, view(out, {2, 4}));
    BOOST_ERROR("a bias of 3 for rows of 4 was accepted");
  } catch (const error& e) {
    BOOST_TEST(std::string(e.what()).find("layer_norm: bias") != std::string::npos);
  }
  BOOST_CHECK_THROW(be.layer_norm(view(x, {2, 4}), view(w, {4}), view(w, {4}), 1e-5f, view(out, {4, 2})),
                    error);
}

BOOST_AUTO_TEST_CASE(key_only_kv_allocates_no_values) {
  cpu::cpu_backend be({1, 64, nullptr});
  kv_layout l{3, 8, 4, 1, 72, dtype::f32};
  BOOST_TEST(l.values);  // K and V by default
  const int64_t both = l.bytes_per_token();
  auto kv = be.alloc_kv(l);
  for (int i = 0; i < 3; ++i) {
    const ref::paged_kv p = dynamic_cast<cpu::cpu_kv&>(*kv).layer(i);
    BOOST_TEST((p.k != nullptr && p.v != nullptr && p.k != p.v));
  }
  l.values = false;
  BOOST_TEST(l.bytes_per_token() * 2 == both);
  auto keys = be.alloc_kv(l);
  BOOST_TEST(!keys->layout().values);
  for (int i = 0; i < 3; ++i) {
    const ref::paged_kv p = dynamic_cast<cpu::cpu_kv&>(*keys).layer(i);
    BOOST_TEST(p.k != nullptr);
    BOOST_TEST(p.v == nullptr);
    BOOST_TEST(p.head_dim == 72);
    p.k[p.slots() * p.token_stride() - 1] = 1.0f;  // the whole K is there
  }
  // GQA attention needs V: a key-only cache is refused, naming the op.
  test::batch_builder b({{{1}, 0, 2}}, 4);
  std::vector<float> q(2 * 72), k(2 * 72), v(2 * 72), out(2 * 72);
  try {
    be.attention(view(q, {2, 1, 72}), view(k, {2, 1, 72}), view(v, {2, 1, 72}), *keys, 0, b.batch, 0.1f,
                 view(out, {2, 1, 72}));
    BOOST_ERROR("attention accepted a key-only cache");
  } catch (const error& e) {
    BOOST_TEST(std::string(e.what()).find("attention: kv is a key-only cache") != std::string::npos);
  }
  BOOST_CHECK_NO_THROW(be.attention(view(q, {2, 1, 72}), view(k, {2, 1, 72}), view(v, {2, 1, 72}), *kv, 0,
                                    b.batch, 0.1f, view(out, {2, 1, 72})));
}
