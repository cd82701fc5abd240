// Block LDL, LDLQ and one-linear quantization against naive double implementations.
#define BOOST_TEST_MODULE exl3_ldlq
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <random>
#include <vector>

#include "tandem/error.hpp"
#include "tandem_exl3/ldlq.hpp"
#include "tandem_exl3/quantize_linear.hpp"

using namespace tandem::exl3;
using mat = std::vector<double>;

namespace {

// H = XᵀX / rows + small ridge, with correlated columns (X = Z·A).
mat random_hessian(int k, int rows, std::mt19937& g, double corr = 0.9) {
  std::normal_distribution<double> n;
  mat x(static_cast<size_t>(rows) * k);
  for (int r = 0; r < rows; ++r) {
    double prev = n(g);
    for (int c = 0; c < k; ++c) {
      prev = corr * prev + std::sqrt(1 - corr * corr) * n(g);
      x[static_cast<size_t>(r) * k + c] = prev * (1 + 0.5 * (c % 5));
    }
  }
  mat h(static_cast<size_t>(k) * k, 0.0);
  for (int r = 0; r < rows; ++r)
    for (int i = 0; i < k; ++i)
      for (int j = 0; j < k; ++j) h[i * k + j] += x[r * k + i] * x[r * k + j] / rows;
  return h;
}

double quad(const mat& h, int k, const mat& e, int n) {
  double t = 0;
  for (int j = 0; j < n; ++j)
    for (int a = 0; a < k; ++a)
      for (int b = 0; b < k; ++b) t += e[a * n + j] * h[a * k + b] * e[b * n + j];
  return t;
}

float grid(float x) { return std::round(x * 4.0f) / 4.0f; }

}  // namespace

BOOST_AUTO_TEST_CASE(block_ldl_reconstructs_h) {
  std::mt19937 g(1);
  const int k = 64;
  const mat h = random_hessian(k, 200, g);
  mat d;
  const mat L = block_ldl(h, k, 0.0, 16, &d);
  mat u(k * k, 0.0);  // L + I
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      if (i / 16 <= j / 16) BOOST_TEST_REQUIRE(L[i * k + j] == 0.0);  // strictly block-lower
      u[i * k + j] = L[i * k + j] + (i == j ? 1.0 : 0.0);
    }
  double worst = 0, scale = 0;
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      double s = 0;
      for (int a = 0; a < k; ++a) {
        const int blk = a / 16;
        for (int b = blk * 16; b < blk * 16 + 16; ++b)
          s += u[i * k + a] * d[(blk * 16 + a % 16) * 16 + b % 16] * u[j * k + b];
      }
      worst = std::max(worst, std::fabs(s - h[i * k + j]));
      scale = std::max(scale, std::fabs(h[i * k + j]));
    }
  BOOST_TEST(worst < 1e-9 * scale);
}

BOOST_AUTO_TEST_CASE(block_ldl_damps_or_fails) {
  const int k = 16;
  mat h(k * k, 0.0);  // singular: retries with damping succeed
  BOOST_CHECK_NO_THROW(block_ldl(h, k, 0.1));
  mat neg(k * k, 0.0);
  for (int i = 0; i < k; ++i) neg[i * k + i] = -100.0;
  BOOST_CHECK_THROW(block_ldl(neg, k, 0.1), tandem::error);
  BOOST_CHECK_THROW(block_ldl(neg, 20, 0.1), tandem::error);  // not a multiple of 16
}

// ldlq against a naive double implementation of the same recurrence, with a scalar grid
// quantizer; and feedback lowers tr(EᵀHE) against plain rounding.
BOOST_AUTO_TEST_CASE(ldlq_matches_naive_and_helps) {
  std::mt19937 g(2);
  const int k = 64, n = 32;
  const mat h = random_hessian(k, 300, g, 0.95);
  const mat L = block_ldl(h, k, 0.0);
  std::normal_distribution<float> nd;
  std::vector<float> w(k * n), q(k * n);
  for (float& x : w) x = nd(g);
  const block_quantizer qfn = [&](int, const float* t, float* out) {
    for (int i = 0; i < 16 * n; ++i) out[i] = grid(t[i]);
  };
  ldlq(w.data(), k, n, L.data(), qfn, q.data());

  mat e(k * n, 0.0), qn(k * n, 0.0), e_plain(k * n);
  for (int b = k - 16; b >= 0; b -= 16)
    for (int r = b; r < b + 16; ++r)
      for (int j = 0; j < n; ++j) {
        double t = w[r * n + j];
        for (int i = b + 16; i < k; ++i) t += L[i * k + r] * e[i * n + j];
        qn[r * n + j] = grid(static_cast<float>(t));
        e[r * n + j] = w[r * n + j] - qn[r * n + j];
      }
  int mismatches = 0;
  for (int i = 0; i < k * n; ++i) mismatches += q[i] != qn[i];
  BOOST_TEST(mismatches == 0);
  for (int i = 0; i < k * n; ++i) e_plain[i] = w[i] - grid(w[i]);
  const double with = quad(h, k, e, n), without = quad(h, k, e_plain, n);
  BOOST_TEST_MESSAGE("tr(EᵀHE) with feedback " << with << ", plain rounding " << without);
  BOOST_TEST(with < 0.8 * without);
}

// The rotated, damped Hessian is what L factors: (L+I)·D·(L+I)ᵀ == Hb·S·(H + damp)·S·Hb.
BOOST_AUTO_TEST_CASE(prepare_hessian_rotates_and_damps) {
  std::mt19937 g(3);
  const int k0 = 100;  // padded to 128
  const mat h = random_hessian(k0, 150, g);
  const prepared_hessian hp = prepare_hessian(h.data(), k0, 7);
  BOOST_TEST(hp.k == 128);
  BOOST_TEST(!hp.fallback);
  const int k = hp.k;
  double md = 0;
  for (int i = 0; i < k0; ++i) md += h[i * k0 + i];
  md /= k;
  mat m(k * k, 0.0);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j)
      m[i * k + j] = ((i < k0 && j < k0) ? h[i * k0 + j] : 0.0) + (i == j ? sigma_reg * md : 0.0);
  // Hb[i][j] = (-1)^popcount(i&j) / sqrt(128), naive.
  auto hb = [](int i, int j) { return (__builtin_popcount(i & j) & 1 ? -1.0 : 1.0) / std::sqrt(128.0); };
  mat r(k * k, 0.0), t(k * k, 0.0);
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      double s = 0;
      for (int a = 0; a < k; ++a) s += hb(i, a) * hp.su[a] * m[a * k + j] * hp.su[j];
      t[i * k + j] = s;
    }
  for (int i = 0; i < k; ++i)
    for (int j = 0; j < k; ++j) {
      double s = 0;
      for (int a = 0; a < k; ++a) s += t[i * k + a] * hb(a, j);
      r[i * k + j] = s;
    }
  mat d;
  const mat L = block_ldl(r, k, 0.0, 16, &d);
  double worst = 0;
  for (size_t i = 0; i < L.size(); ++i) worst = std::max(worst, std::fabs(L[i] - hp.L[i]));
  BOOST_TEST(worst < 1e-8);
  for (int i = 0; i < k; ++i) BOOST_TEST_REQUIRE(std::fabs(hp.su[i]) == 1.0f);
  // The same seed gives the same signs; another seed other signs.
  BOOST_TEST(prepare_hessian(h.data(), k0, 7).su == hp.su);
  BOOST_TEST(prepare_hessian(h.data(), k0, 8).su != hp.su);
}

// A whole linear: padding, shapes, error levels; LDLQ beats the Hessian-blind fallback
// on the Hessian's own proxy error.
BOOST_AUTO_TEST_CASE(quantize_linear_end_to_end) {
  std::mt19937 g(4);
  const int k0 = 96, n0 = 80;
  std::normal_distribution<float> nd;
  std::vector<float> w(k0 * n0);
  for (float& x : w) x = 0.02f * nd(g);
  quant_options o;
  o.bits = 4;
  o.threads = 2;
  const prepared_hessian fb = prepare_hessian(nullptr, k0, 1);
  const quantized_linear a = quantize_linear(w.data(), k0, n0, fb, 1, 1, o);
  BOOST_TEST(a.k == 128);
  BOOST_TEST(a.n == 128);
  BOOST_TEST(a.trellis.size() == 8u * 8 * 16 * 4);
  BOOST_TEST(a.suh.size() == 128u);
  BOOST_TEST(a.svh.size() == 128u);
  for (int j = n0; j < 128; ++j) BOOST_TEST(a.svh[j] == 0);  // padded output columns
  double se = 0, ss = 0;
  for (size_t i = 0; i < w.size(); ++i) se += (w[i] - a.w_hat[i]) * (w[i] - a.w_hat[i]), ss += w[i] * w[i];
  BOOST_TEST_MESSAGE("fallback K=4: relative error " << se / ss << ", proxy " << a.proxy_error
                     << ", g " << a.global_scale);
  BOOST_TEST(std::fabs(se / ss - a.proxy_error) < 1e-6);  // H = I: proxy == relative MSE
  BOOST_TEST(a.proxy_error > 0.001);
  BOOST_TEST(a.proxy_error < 0.012);

  const mat h = random_hessian(k0, 400, g, 0.95);
  const prepared_hessian hp = prepare_hessian(h.data(), k0, 1);
  const quantized_linear b = quantize_linear(w.data(), k0, n0, hp, 1, 1, o);
  mat eb(k0 * n0), ea(k0 * n0), wd(k0 * n0);
  for (int i = 0; i < k0 * n0; ++i) eb[i] = w[i] - b.w_hat[i], ea[i] = w[i] - a.w_hat[i], wd[i] = w[i];
  const double den = quad(h, k0, wd, n0);
  BOOST_TEST(std::fabs(quad(h, k0, eb, n0) / den - b.proxy_error) < 1e-6);
  BOOST_TEST_MESSAGE("with H: proxy " << b.proxy_error << " vs fallback under H " << quad(h, k0, ea, n0) / den);
  BOOST_TEST(b.proxy_error < quad(h, k0, ea, n0) / den);

  o.bits = 9;
  BOOST_CHECK_THROW(quantize_linear(w.data(), k0, n0, fb, 1, 1, o), tandem::error);
  o.bits = 4;
  BOOST_CHECK_THROW(quantize_linear(w.data(), k0 + 1, n0, fb, 1, 1, o), tandem::error);
}
