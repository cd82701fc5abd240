// The 128-point Hadamard: orthogonality, agreement with a naive double-precision matrix,
// and the fp16 rounding helpers against tandem_quant's independent conversions.
#define BOOST_TEST_MODULE exl3_hadamard
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "tandem_exl3/codebook.hpp"
#include "tandem_exl3/hadamard.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem::exl3;

namespace {

double naive_h(int i, int j) { return (std::popcount(unsigned(i & j)) & 1 ? -1.0 : 1.0) / std::sqrt(128.0); }

}  // namespace

BOOST_AUTO_TEST_CASE(matches_naive_matrix) {
  std::mt19937 rng(1);
  std::normal_distribution<float> nd;
  std::vector<float> x(384);
  for (auto& v : x) v = nd(rng);
  std::vector<float> y = x;
  hadamard128(y.data(), static_cast<int64_t>(y.size()));
  for (int c = 0; c < 3; ++c)
    for (int i = 0; i < 128; ++i) {
      double ref = 0;
      for (int j = 0; j < 128; ++j) ref += naive_h(i, j) * x[c * 128 + j];
      BOOST_TEST_REQUIRE(std::fabs(y[c * 128 + i] - ref) < 2e-5);
    }
}

BOOST_AUTO_TEST_CASE(orthogonal_and_self_inverse) {
  // Columns of H are H e_j; H H = I up to f32 rounding.
  for (int j = 0; j < 128; ++j) {
    std::vector<float> e(128, 0.0f);
    e[j] = 1.0f;
    hadamard128(e.data(), 128);
    for (int i = 0; i < 128; ++i) BOOST_TEST_REQUIRE(std::fabs(e[i] - naive_h(i, j)) < 1e-7);
    hadamard128(e.data(), 128);
    for (int i = 0; i < 128; ++i) BOOST_TEST_REQUIRE(std::fabs(e[i] - (i == j ? 1.0 : 0.0)) < 1e-6);
  }
  // Norm preserved.
  std::mt19937 rng(2);
  std::normal_distribution<float> nd;
  std::vector<float> x(128);
  double n0 = 0, n1 = 0;
  for (auto& v : x) {
    v = nd(rng);
    n0 += double(v) * v;
  }
  hadamard128(x.data(), 128);
  for (float v : x) n1 += double(v) * v;
  BOOST_TEST(std::fabs(n0 - n1) < 1e-4 * n0);
}

BOOST_AUTO_TEST_CASE(input_side_rounds_like_the_gpu) {
  std::mt19937 rng(3);
  std::normal_distribution<float> nd;
  std::vector<uint16_t> x(256), suh(256), out(256);
  for (auto& v : x) v = f32_to_f16(nd(rng));
  for (auto& v : suh) v = f32_to_f16((rng() & 1 ? -1.0f : 1.0f) * (0.5f + std::fabs(nd(rng))));
  hadamard128_input_gpu(x.data(), suh.data(), 256, out.data());
  for (int c = 0; c < 2; ++c)
    for (int i = 0; i < 128; ++i) {
      // Exact value from the fp16-rounded products; the result may differ from it by the
      // f32 butterfly error plus one fp16 rounding.
      double ref = 0;
      for (int j = 0; j < 128; ++j) {
        const int q = c * 128 + j;
        ref += naive_h(i, j) * half_to_double(f16_mul(x[q], suh[q]));
      }
      const double got = half_to_double(out[c * 128 + i]);
      BOOST_TEST_REQUIRE(std::fabs(got - ref) <= std::fabs(ref) * (1.0 / 1024) + 1e-5);
    }
  // Without suh the first output is fp16(sum(x) * scale) for a constant chunk: exact.
  std::vector<uint16_t> ones(128, 0x3c00), o(128);
  hadamard128_input_gpu(ones.data(), nullptr, 128, o.data());
  BOOST_TEST(o[0] == f32_to_f16(128.0f * hadamard_scale));
  for (int i = 1; i < 128; ++i) BOOST_TEST_REQUIRE(o[i] == 0);
}

BOOST_AUTO_TEST_CASE(fp16_helpers_agree_with_tandem_quant) {
  std::mt19937 rng(4);
  for (int i = 0; i < 2000000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    BOOST_TEST_REQUIRE(f32_to_f16(f) == tandem::fp32_to_fp16(f));
  }
  for (uint32_t h = 0; h < 65536; ++h) {
    const float ref = tandem::fp16_to_fp32(static_cast<uint16_t>(h));
    const float got = f16_to_f32(static_cast<uint16_t>(h));
    BOOST_TEST_REQUIRE((std::bit_cast<uint32_t>(got) == std::bit_cast<uint32_t>(ref) ||
                        (std::isnan(got) && std::isnan(ref))));
  }
  BOOST_TEST(f16_mul(0x3c00, 0xc000) == 0xc000);  // 1 * -2
  BOOST_TEST(f16_add(0x3c00, 0x1000) == 0x3c00);  // 1 + half an ulp (2^-11) ties to even: 1
  BOOST_TEST(f16_add(0x3c01, 0x1000) == 0x3c02);  // 1+ulp + half ulp ties to even: 1+2ulp
}

BOOST_AUTO_TEST_CASE(bad_lengths_throw) {
  std::vector<float> x(200);
  BOOST_CHECK_THROW(hadamard128(x.data(), 200), std::invalid_argument);
  std::vector<uint16_t> h(200), o(200);
  BOOST_CHECK_THROW(hadamard128_input_gpu(h.data(), nullptr, 100, o.data()), std::invalid_argument);
}
