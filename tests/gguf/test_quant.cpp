#define BOOST_TEST_MODULE quant
#include <boost/test/unit_test.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <cstdlib>
#include <fstream>
#include <limits>
#include <random>
#include <sstream>
#include <vector>

#include <boost/json.hpp>

#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;

// Known encodings, checked at compile time.
static_assert(fp16_to_fp32(0x3c00) == 1.0f);
static_assert(fp16_to_fp32(0xc000) == -2.0f);
static_assert(fp16_to_fp32(0x7bff) == 65504.0f);
static_assert(fp16_to_fp32(0x0400) == 0x1p-14f);
static_assert(fp16_to_fp32(0x0001) == 0x1p-24f);
static_assert(fp16_to_fp32(0x03ff) == 0x3ffp-24f);
static_assert(fp16_to_fp32(0x7c00) == std::numeric_limits<float>::infinity());
static_assert(fp32_to_fp16(1.0f) == 0x3c00);
static_assert(fp32_to_fp16(-0.0f) == 0x8000);
static_assert(fp32_to_fp16(0.1f) == 0x2e66);
static_assert(fp32_to_fp16(1.0f + 0x1p-11f) == 0x3c00);       // tie -> even
static_assert(fp32_to_fp16(1.0f + 3 * 0x1p-11f) == 0x3c02);   // tie -> even (up)
static_assert(fp32_to_fp16(65519.0f) == 0x7bff);
static_assert(fp32_to_fp16(65520.0f) == 0x7c00);               // rounds past the max
static_assert(fp32_to_fp16(0x1p-25f) == 0x0000);               // half the smallest subnormal
static_assert(fp32_to_fp16(0x1.0002p-25f) == 0x0001);
static_assert(fp32_to_fp16(3 * 0x1p-25f) == 0x0002);           // 1.5 ulp ties to even
static_assert(fp32_to_fp16(0x1p-14f - 0x1p-26f) == 0x0400);    // rounds up into the normals
static_assert(bf16_to_fp32(0x3f80) == 1.0f);
static_assert(fp32_to_bf16(1.0f) == 0x3f80);
static_assert(fp32_to_bf16(std::bit_cast<float>(0x3f808000u)) == 0x3f80);  // tie -> even
static_assert(fp32_to_bf16(std::bit_cast<float>(0x3f818000u)) == 0x3f82);  // tie -> even
static_assert(fp32_to_bf16(std::bit_cast<float>(0x7f7fffffu)) == 0x7f80);  // FLT_MAX -> inf

BOOST_AUTO_TEST_CASE(fp16_round_trips_every_value) {
  for (uint32_t h = 0; h < 0x10000; ++h) {
    const float f = fp16_to_fp32(static_cast<uint16_t>(h));
    if (std::isnan(f)) {
      BOOST_TEST((h & 0x7c00) == 0x7c00);
      BOOST_TEST(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    BOOST_TEST_REQUIRE(fp32_to_fp16(f) == h);
  }
}

#if defined(__FLT16_MAX__)
// The compiler's own _Float16 conversion (libgcc, round to nearest even) is an
// independent reference for every rounding case.
BOOST_AUTO_TEST_CASE(fp32_to_fp16_matches_compiler) {
  std::mt19937 rng(7);
  for (int i = 0; i < 2'000'000; ++i) {
    uint32_t bits = rng();
    if (i % 2) bits = (bits & 0x80ffffffu) | ((100u + rng() % 45u) << 23);  // the fp16 range
    const float f = std::bit_cast<float>(bits);
    if (std::isnan(f)) continue;
    const auto ref = std::bit_cast<uint16_t>(static_cast<_Float16>(f));
    BOOST_TEST_REQUIRE(fp32_to_fp16(f) == ref, "input bits " << std::hex << bits);
  }
}
#endif

BOOST_AUTO_TEST_CASE(bf16_round_trips_and_rounds) {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const float f = bf16_to_fp32(static_cast<uint16_t>(b));
    if (std::isnan(f)) {
      BOOST_TEST(std::isnan(bf16_to_fp32(fp32_to_bf16(f))));
      continue;
    }
    BOOST_TEST_REQUIRE(fp32_to_bf16(f) == b);
    // Just above and below a bf16 value rounds back to it (not near a tie).
    const uint32_t bits = std::bit_cast<uint32_t>(f);
    if ((bits & 0x7f800000u) != 0x7f800000u) {
      BOOST_TEST_REQUIRE(fp32_to_bf16(std::bit_cast<float>(bits + 0x7fffu)) == b);
    }
  }
  BOOST_TEST(std::isnan(bf16_to_fp32(fp32_to_bf16(std::bit_cast<float>(0x7f800001u)))));
}

BOOST_AUTO_TEST_CASE(q4_nibble_order) {
  block_q4_0 b0{};
  block_q4_1 b1{};
  b0.d = b1.d = fp32_to_fp16(2.0f);
  b1.m = fp32_to_fp16(-1.0f);
  for (int j = 0; j < 16; ++j) b0.qs[j] = b1.qs[j] = static_cast<uint8_t>(j | ((15 - j) << 4));
  float y0[32], y1[32];
  dequantize_row(dtype::q4_0, &b0, y0, 32);
  dequantize_row(dtype::q4_1, &b1, y1, 32);
  for (int j = 0; j < 16; ++j) {
    BOOST_TEST(y0[j] == 2.0f * (j - 8));               // low nibble of qs[j]
    BOOST_TEST(y0[j + 16] == 2.0f * ((15 - j) - 8));   // high nibble of qs[j]
    BOOST_TEST(y1[j] == 2.0f * j - 1.0f);
    BOOST_TEST(y1[j + 16] == 2.0f * (15 - j) - 1.0f);
  }
}

BOOST_AUTO_TEST_CASE(q8_0_known_values) {
  block_q8_0 b[2]{};
  b[0].d = fp32_to_fp16(0.5f);
  b[1].d = fp32_to_fp16(-0.25f);
  for (int j = 0; j < 32; ++j) {
    b[0].qs[j] = static_cast<int8_t>(j - 16);
    b[1].qs[j] = static_cast<int8_t>(j == 0 ? -128 : 127);
  }
  float y[64];
  dequantize_row(dtype::q8_0, b, y, 64);
  for (int j = 0; j < 32; ++j) BOOST_TEST(y[j] == 0.5f * (j - 16));
  BOOST_TEST(y[32] == 32.0f);
  BOOST_TEST(y[63] == -31.75f);
}

BOOST_AUTO_TEST_CASE(float_rows) {
  const float src[3] = {1.5f, -2.0f, 0.1f};
  const uint16_t h[3] = {fp32_to_fp16(1.5f), fp32_to_fp16(-2.0f), 0x7c00};
  const uint16_t bf[3] = {0x3fc0, 0xc000, 0x3dcd};
  float y[3];
  dequantize_row(dtype::f32, src, y, 3);
  BOOST_TEST(y[2] == 0.1f);
  dequantize_row(dtype::f16, h, y, 3);
  BOOST_TEST(y[0] == 1.5f);
  BOOST_TEST(y[1] == -2.0f);
  BOOST_TEST(std::isinf(y[2]));
  dequantize_row(dtype::bf16, bf, y, 3);
  BOOST_TEST(y[0] == 1.5f);
  BOOST_TEST(y[1] == -2.0f);
  BOOST_TEST(y[2] == 0.10009765625f);
}

BOOST_AUTO_TEST_CASE(bad_arguments_throw) {
  block_q8_0 b{};
  float y[64];
  BOOST_CHECK_THROW(dequantize_row(dtype::q8_0, &b, y, 31), tandem::error);
  BOOST_CHECK_THROW(dequantize_row(dtype::i32, &b, y, 4), tandem::error);
  BOOST_CHECK_THROW(quantize_row_q8_0(y, &b, 33), tandem::error);
  BOOST_CHECK_THROW(quantize_row_q4_1(y, &b, -32), tandem::error);
}

// Quantize then dequantize: every element lands within half a step (plus the fp16
// rounding of the scale and minimum).
BOOST_AUTO_TEST_CASE(quantize_round_trips) {
  std::mt19937 rng(11);
  std::normal_distribution<float> dist(0.3f, 2.0f);
  const int64_t n = 32 * 64;
  std::vector<float> x(n), y(n);
  for (auto& v : x) v = dist(rng);
  std::vector<block_q8_0> q8(n / 32);
  std::vector<block_q4_1> q41(n / 32);
  std::vector<block_q4_0> q40(n / 32);
  quantize_row_q8_0(x.data(), q8.data(), n);
  dequantize_row(dtype::q8_0, q8.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    BOOST_TEST_REQUIRE(std::fabs(x[i] - y[i]) <= fp16_to_fp32(q8[i / 32].d) * 0.5f + 1e-3f * std::fabs(x[i]));
  }
  quantize_row_q4_1(x.data(), q41.data(), n);
  dequantize_row(dtype::q4_1, q41.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    BOOST_TEST_REQUIRE(std::fabs(x[i] - y[i]) <= fp16_to_fp32(q41[i / 32].d) * 0.5f + 1e-2f);
  }
  quantize_row_q4_0(x.data(), q40.data(), n);
  dequantize_row(dtype::q4_0, q40.data(), y.data(), n);
  for (int64_t i = 0; i < n; ++i) {
    // Q4_0 maps the largest magnitude to -8; its opposite clamps at +7, a whole step off.
    BOOST_TEST_REQUIRE(std::fabs(x[i] - y[i]) <= std::fabs(fp16_to_fp32(q40[i / 32].d)) + 1e-2f);
  }
}

namespace {

boost::json::value load_fixture() {
  const char* dir = std::getenv("TANDEM_FIXTURES");
  BOOST_TEST_REQUIRE(dir != nullptr);
  std::ifstream in(std::string(dir) + "/gguf/smollm2_reference.json");
  BOOST_TEST_REQUIRE(in.good());
  std::stringstream ss;
  ss << in.rdbuf();
  return boost::json::parse(ss.str());
}

std::vector<float> floats(const boost::json::value& v) {
  std::vector<float> out;
  for (const auto& x : v.as_array()) out.push_back(static_cast<float>(x.to_number<double>()));
  return out;
}

std::vector<uint8_t> unhex(std::string_view s) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i + 1 < s.size(); i += 2) {
    out.push_back(static_cast<uint8_t>(std::stoi(std::string(s.substr(i, 2)), nullptr, 16)));
  }
  return out;
}

}  // namespace

// Rows quantized by the `gguf` Python package (tools/fixtures/gguf_reference.py): our
// quantizers produce the same bytes and our dequantization the same values.
BOOST_AUTO_TEST_CASE(matches_gguf_python_quantizers) {
  const auto fixture = load_fixture();
  int checked = 0;
  for (const auto& c : fixture.at("synthetic").as_array()) {
    const std::string type(c.at("type").as_string());
    const auto x = floats(c.at("input"));
    const auto ref_bytes = unhex(c.at("bytes").as_string());
    const auto ref_values = floats(c.at("dequantized"));
    const auto n = static_cast<int64_t>(x.size());
    std::vector<uint8_t> ours(ref_bytes.size());
    dtype t = dtype::f32;
    if (type == "Q4_0") { t = dtype::q4_0; quantize_row_q4_0(x.data(), ours.data(), n); }
    if (type == "Q4_1") { t = dtype::q4_1; quantize_row_q4_1(x.data(), ours.data(), n); }
    if (type == "Q8_0") { t = dtype::q8_0; quantize_row_q8_0(x.data(), ours.data(), n); }
    for (int64_t i = 0; i < n && (type == "F16" || type == "BF16"); ++i) {
      t = type == "F16" ? dtype::f16 : dtype::bf16;
      const uint16_t h = t == dtype::f16 ? fp32_to_fp16(x[i]) : fp32_to_bf16(x[i]);
      std::memcpy(ours.data() + 2 * i, &h, 2);
    }
    BOOST_TEST_REQUIRE((t != dtype::f32), "unexpected fixture type " << type);
    BOOST_TEST(ours == ref_bytes, type << " bytes differ from gguf's");
    std::vector<float> y(n);
    dequantize_row(t, ref_bytes.data(), y.data(), n);
    for (int64_t i = 0; i < n; ++i) BOOST_TEST_REQUIRE(y[i] == ref_values[i], type << " at " << i);
    ++checked;
  }
  BOOST_TEST(checked == 5);
}
