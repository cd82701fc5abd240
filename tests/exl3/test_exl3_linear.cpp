// decode_rotated / reconstruct_f32 / linear_ref on random trellises, against naive
// double-precision matrices built straight from the spec's formulas.
#define BOOST_TEST_MODULE exl3_linear
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "tandem_exl3/hadamard.hpp"
#include "tandem_exl3/linear.hpp"
#include "tandem_exl3/trellis.hpp"

using namespace tandem::exl3;

namespace {

struct random_layer {
  std::vector<uint16_t> trellis, suh, svh, bias;
  exl3_matrix m;

  random_layer(int K, codebook cb, int64_t k, int64_t n, bool with_bias, uint32_t seed) {
    std::mt19937 rng(seed);
    std::uniform_real_distribution<float> u(0.5f, 1.5f);
    trellis.resize(static_cast<size_t>(k / 16 * (n / 16) * tile_words(K)));
    for (auto& w : trellis) w = static_cast<uint16_t>(rng());
    auto scales = [&](std::vector<uint16_t>& v, int64_t len, float mag) {
      v.resize(len);
      for (auto& s : v) s = f32_to_f16((rng() & 1 ? -mag : mag) * u(rng));
    };
    scales(suh, k, 0.05f);
    scales(svh, n, 1.0f);
    if (with_bias) scales(bias, n, 0.1f);
    m = {K, cb, k, n, trellis.data(), suh.data(), svh.data(), with_bias ? bias.data() : nullptr};
  }
};

double h128(int64_t i, int64_t j) {  // block-diagonal Hb
  if (i / 128 != j / 128) return 0.0;
  return (std::popcount(uint64_t(i & j & 127)) & 1 ? -1.0 : 1.0) / std::sqrt(128.0);
}

// W = diag(suh) Hb Ŵ Hb diag(svh), in double from the spec's formula.
std::vector<double> naive_weight(const exl3_matrix& m) {
  std::vector<uint16_t> wh(m.k * m.n);
  decode_rotated(m, wh.data());
  std::vector<double> t(m.k * m.n, 0.0), W(m.k * m.n, 0.0);
  for (int64_t i = 0; i < m.k; ++i)  // t = Hb Ŵ
    for (int64_t l = i / 128 * 128; l < i / 128 * 128 + 128; ++l)
      for (int64_t j = 0; j < m.n; ++j) t[i * m.n + j] += h128(i, l) * half_to_double(wh[l * m.n + j]);
  for (int64_t i = 0; i < m.k; ++i)  // W = t Hb, then the scales
    for (int64_t j = 0; j < m.n; ++j) {
      double s = 0;
      for (int64_t l = j / 128 * 128; l < j / 128 * 128 + 128; ++l) s += t[i * m.n + l] * h128(l, j);
      W[i * m.n + j] = half_to_double(m.suh[i]) * s * half_to_double(m.svh[j]);
    }
  return W;
}

double rms(const std::vector<double>& v) {
  double s = 0;
  for (double x : v) s += x * x;
  return std::sqrt(s / v.size());
}

}  // namespace

BOOST_AUTO_TEST_CASE(decode_rotated_places_every_tile) {
  random_layer L(3, codebook::mcg, 256, 128, false, 5);
  std::vector<uint16_t> wh(256 * 128);
  decode_rotated(L.m, wh.data());
  for (int64_t tk = 0; tk < 16; ++tk)
    for (int64_t tn = 0; tn < 8; ++tn) {
      uint16_t s[256];
      unpack_tile_states(L.trellis.data() + (tk * 8 + tn) * tile_words(3), 3, s);
      for (int p = 0; p < 256; ++p) {
        const tile_rc rc = position_to_rc(p);
        BOOST_TEST_REQUIRE(wh[(tk * 16 + rc.r) * 128 + tn * 16 + rc.c] == decode_bits(codebook::mcg, s[p]));
      }
    }
}

BOOST_AUTO_TEST_CASE(reconstruct_matches_naive_formula) {
  for (codebook cb : {codebook::inst3, codebook::mcg, codebook::mul1}) {
    random_layer L(static_cast<int>(cb) * 3 + 2, cb, 256, 384, false, 10 + static_cast<int>(cb));
    const auto ref = naive_weight(L.m);
    std::vector<float> W(L.m.k * L.m.n);
    reconstruct_f32(L.m, W.data());
    const double scale = rms(ref);
    for (size_t i = 0; i < W.size(); ++i) BOOST_TEST_REQUIRE(std::fabs(W[i] - ref[i]) < 1e-5 * scale * 10);
    // A band equals the same rows of the whole.
    std::vector<float> band(128 * L.m.n);
    reconstruct_f32_rows(L.m, 128, 256, band.data());
    for (size_t i = 0; i < band.size(); ++i) BOOST_TEST_REQUIRE(band[i] == W[128 * L.m.n + i]);
  }
}

BOOST_AUTO_TEST_CASE(linear_ref_agrees_with_reconstruct) {
  for (int K = 1; K <= 8; ++K) {
    const auto cb = static_cast<codebook>(K % 3);
    random_layer L(K, cb, 256, 256, K % 2 == 0, 100 + K);
    std::vector<float> W(L.m.k * L.m.n);
    reconstruct_f32(L.m, W.data());
    const int64_t rows = 3;
    std::mt19937 rng(K);
    std::normal_distribution<float> nd;
    std::vector<float> x(rows * L.m.k);
    for (auto& v : x) v = nd(rng);
    std::vector<double> ref(rows * L.m.n, 0.0);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < L.m.n; ++j) {
        double s = L.m.bias ? half_to_double(L.m.bias[j]) : 0.0;
        for (int64_t l = 0; l < L.m.k; ++l) s += double(x[i * L.m.k + l]) * W[l * L.m.n + j];
        ref[i * L.m.n + j] = s;
      }
    const double scale = rms(ref);
    std::vector<float> y(rows * L.m.n), yg(rows * L.m.n), yparts(rows * L.m.n);
    linear_ref(L.m, x.data(), rows, y.data(), rounding::none);
    linear_ref(L.m, x.data(), rows, yg.data(), rounding::gpu);
    linear_ref(L.m, x.data(), rows, yparts.data(), rounding::gpu, 0, 128);
    linear_ref(L.m, x.data(), rows, yparts.data(), rounding::gpu, 128, 256);
    double err_none = 0, err_gpu = 0;
    for (size_t i = 0; i < y.size(); ++i) {
      err_none = std::max(err_none, std::fabs(y[i] - ref[i]));
      err_gpu = std::max(err_gpu, std::fabs(yg[i] - ref[i]));
      BOOST_TEST_REQUIRE(f32_to_f16(yg[i]) == f32_to_f16(yg[i]));
      BOOST_TEST_REQUIRE(f16_to_f32(f32_to_f16(yg[i])) == yg[i]);  // an fp16 value
      BOOST_TEST_REQUIRE(yparts[i] == yg[i]);
    }
    BOOST_TEST_MESSAGE("K=" << K << " rms " << scale << " max err f32 " << err_none << " fp16 " << err_gpu);
    BOOST_TEST(err_none < 1e-5 * scale * 20);
    BOOST_TEST(err_gpu < 1.5e-2 * scale);  // fp16 activations, weights and output
    BOOST_TEST(err_gpu > 0.0);             // the fp16 roundings happened
  }
}

BOOST_AUTO_TEST_CASE(validate_rejects_bad_matrices) {
  random_layer L(4, codebook::mul1, 128, 128, false, 1);
  exl3_matrix m = L.m;
  m.K = 0;
  BOOST_CHECK_THROW(validate(m), std::invalid_argument);
  m = L.m;
  m.n = 144;
  BOOST_CHECK_THROW(validate(m), std::invalid_argument);
  m = L.m;
  m.svh = nullptr;
  BOOST_CHECK_THROW(validate(m), std::invalid_argument);
  std::vector<float> W(128 * 128);
  BOOST_CHECK_THROW(reconstruct_f32_rows(L.m, 0, 64, W.data()), std::invalid_argument);
  BOOST_CHECK_THROW(linear_ref(L.m, W.data(), 1, W.data(), rounding::gpu, 0, 100), std::invalid_argument);
}
