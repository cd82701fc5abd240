// The EXL3 tile coder: fp16 cost arithmetic, the DP against brute force, exact
// reproduction of codebook sequences, the tail-biting invariant and MSE per K.
#define BOOST_TEST_MODULE exl3_viterbi
#include <boost/test/unit_test.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

#include "tandem/error.hpp"
#include "tandem_exl3/codebook.hpp"
#include "tandem_exl3/trellis.hpp"
#include "tandem_exl3/viterbi.hpp"

using namespace tandem::exl3;

namespace {

// Independent fp16 rounding of an exact value given as an integer multiple of 2^-48
// (every d*d + c with fp16 d and c is one): round to 11 significant bits, nearest even.
double round_fixed48(unsigned __int128 v) {
  if (v == 0) return 0.0;
  int top = 127;
  while (!((v >> top) & 1)) --top;
  // Value exponent is top - 48; fp16 keeps bits down to max(top - 10, 24 - 48 + 0) in
  // units of 2^-48, i.e. a grid of 2^(max(top-10, 24)) units (2^-24 absolute for subnormals).
  const int grid = std::max(top - 10, 24);
  const unsigned __int128 one = 1;
  unsigned __int128 q = v >> grid;
  const unsigned __int128 rem = v & ((one << grid) - 1), half = one << (grid - 1);
  if (rem > half || (rem == half && (q & 1))) ++q;
  const double r = std::ldexp(static_cast<double>(q), grid - 48);
  return r > 65504.0 ? INFINITY : r;
}

unsigned __int128 to_fixed48(double x) {  // x >= 0, a multiple of 2^-48
  return static_cast<unsigned __int128>(std::ldexp(x, 48));
}

// A Gaussian sample rounded to fp16, redrawn beyond +-3 sigma: MUL1 covers [-3.45, 3.35],
// so rarer outliers would be clipped and dominate the MSE at high K.
float random_half(std::mt19937& g, float scale) {
  std::normal_distribution<float> n(0.0f, scale);
  float x;
  do x = n(g);
  while (std::fabs(x) > 3.0f * scale);
  return static_cast<float>(half_to_double(double_to_half(x)));
}

// Path cost of a state sequence, with the coder's fp16 semantics.
float path_cost(const tile_coder& c, const float* w, const uint16_t* s, int len) {
  float cost = 0.0f;
  for (int t = 0; t < len; ++t)
    cost = half_fma_sq(round_to_half(c.table()[s[t]] - w[t]), cost);
  return cost;
}

}  // namespace

BOOST_AUTO_TEST_CASE(round_to_half_matches_double_to_half) {
  std::mt19937 g(1);
  std::uniform_int_distribution<uint32_t> bits;
  for (int i = 0; i < 2000000; ++i) {
    const float x = std::bit_cast<float>(bits(g));
    if (std::isnan(x)) continue;
    const float want = static_cast<float>(half_to_double(double_to_half(x)));
    const float got = round_to_half(x);
    if (std::bit_cast<uint32_t>(want) != std::bit_cast<uint32_t>(got))
      BOOST_FAIL("round_to_half(" << x << ") = " << got << ", want " << want);
  }
}

BOOST_AUTO_TEST_CASE(fma_square_rounds_once) {
  std::mt19937 g(2);
  std::uniform_int_distribution<int> ex(-26, 9);
  std::uniform_real_distribution<float> m(1.0f, 2.0f);
  int checked = 0;
  for (int i = 0; i < 3000000; ++i) {
    const float d = round_to_half(std::ldexp(m(g), ex(g)) * (i & 1 ? -1.0f : 1.0f));
    const float c = i % 7 == 0 ? 0.0f : round_to_half(std::ldexp(m(g), ex(g) + 4));
    if (std::isinf(d) || std::isinf(c)) continue;
    // d is a multiple of 2^-24, so (d * 2^24)^2 is d*d in units of 2^-48.
    const auto d24 = static_cast<unsigned __int128>(std::ldexp(std::fabs(d), 24));
    const double want = round_fixed48(d24 * d24 + to_fixed48(c));
    const float got = half_fma_sq(d, c);
    if (static_cast<double>(got) != want)
      BOOST_FAIL("fp16(d*d + c), d=" << d << " c=" << c << ": got " << got << " want " << want);
    ++checked;
  }
  BOOST_TEST(checked > 2000000);
  BOOST_TEST(std::isinf(half_fma_sq(1.0f, INFINITY)));
  BOOST_TEST(std::isinf(half_fma_sq(200.0f, 30000.0f)));
}

BOOST_AUTO_TEST_CASE(rejects_bad_bits) {
  BOOST_CHECK_THROW(tile_coder(codebook::mul1, 0), tandem::error);
  BOOST_CHECK_THROW(tile_coder(codebook::mul1, 9), tandem::error);
}

// A short free-start, free-end run is the exact minimum over all state sequences.
BOOST_AUTO_TEST_CASE(dp_matches_brute_force) {
  std::mt19937 g(3);
  for (codebook cb : {codebook::mul1, codebook::inst3}) {
    for (int K : {1, 2}) {
      const tile_coder c(cb, K);
      const int len = K == 1 ? 5 : 4;
      for (int trial = 0; trial < 3; ++trial) {
        std::vector<float> w(len);
        for (float& x : w) x = random_half(g, 1.0f);
        std::vector<uint16_t> got(len), s(len);
        const float dp = c.run(w.data(), len, nullptr, -1, got.data());
        float best = INFINITY;
        const uint32_t chunks = 1u << (K * (len - 1));
        for (uint32_t s0 = 0; s0 < 65536; ++s0) {
          for (uint32_t ch = 0; ch < chunks; ++ch) {
            s[0] = static_cast<uint16_t>(s0);
            for (int t = 1; t < len; ++t)
              s[t] = static_cast<uint16_t>((s[t - 1] << K) | ((ch >> (K * (t - 1))) & ((1u << K) - 1)));
            best = std::min(best, path_cost(c, w.data(), s.data(), len));
          }
        }
        BOOST_TEST(dp == best);
        BOOST_TEST(path_cost(c, w.data(), got.data(), len) == dp);
        for (int t = 1; t < len; ++t)
          BOOST_TEST(got[t] >> K == (got[t - 1] & ((1u << (16 - K)) - 1)));
      }
    }
  }
}

// Values that are the codebook values of a tail-biting sequence come back exactly.
BOOST_AUTO_TEST_CASE(reproduces_codebook_sequences) {
  std::mt19937 g(4);
  for (codebook cb : {codebook::mul1, codebook::mcg, codebook::inst3}) {
    for (int K = 1; K <= 8; ++K) {
      const tile_coder c(cb, K);
      std::vector<uint16_t> ring(16 * K), states(256), got(256);
      for (auto& x : ring) x = static_cast<uint16_t>(g());
      unpack_tile_states(ring.data(), K, states.data());
      std::vector<float> w(256), q(256);
      for (int p = 0; p < 256; ++p) w[p] = c.table()[states[p]];
      const float cost = c.encode(w.data(), got.data(), q.data());
      BOOST_TEST(cost == 0.0f);
      BOOST_TEST(q == w, boost::test_tools::per_element());
      BOOST_TEST(is_tail_biting(got.data(), K));
    }
  }
}

// Gaussian tiles: every output is tail-biting and consistent (values = cb(states), the
// cost is the path cost), the states survive pack/unpack, and the MSE falls with K.
BOOST_AUTO_TEST_CASE(gaussian_mse_per_k) {
  std::mt19937 g(5);
  const int n_tiles = 8;
  // Normalized MSE of bitshift trellises on i.i.d. Gaussians (QTIP, L = 16): about
  // 0.069 / 0.018 / 0.0047 at K = 2 / 3 / 4; the rate-distortion bound is 4^-K (the
  // truncated Gaussian here sits slightly below it, hence lo = 0.9 * bound).
  const double lo[9] = {0, 0.225, 0.056, 0.014, 0.0035, 0.00088, 0.00022, 0.000055, 0.000014};
  const double hi[9] = {0, 0.33, 0.080, 0.021, 0.0056, 0.0015, 0.0004, 0.00011, 0.00003};
  double prev = 1.0;
  for (int K = 1; K <= 8; ++K) {
    const char* cbname = std::getenv("EXL3_TEST_CB");
    const tile_coder c(cbname ? *parse_codebook(cbname) : codebook::mul1, K);
    std::vector<float> w(256 * n_tiles), q(256 * n_tiles), cost(n_tiles);
    std::vector<uint16_t> s(256 * n_tiles), packed(16 * K), back(256);
    for (float& x : w) x = random_half(g, 1.0f);
    const auto t0 = std::chrono::steady_clock::now();
    encode_tiles(c, w.data(), n_tiles, s.data(), q.data(), 0, cost.data());
    const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    double se = 0, ss = 0;
    for (int i = 0; i < 256 * n_tiles; ++i) se += (w[i] - q[i]) * (w[i] - q[i]), ss += w[i] * w[i];
    for (int t = 0; t < n_tiles; ++t) {
      const uint16_t* st = s.data() + 256 * t;
      BOOST_TEST(is_tail_biting(st, K));
      BOOST_TEST(path_cost(c, w.data() + 256 * t, st, 256) == cost[t]);
      for (int p = 0; p < 256; ++p) BOOST_TEST_REQUIRE(q[256 * t + p] == c.table()[st[p]]);
      pack_tile_states(st, K, packed.data());
      unpack_tile_states(packed.data(), K, back.data());
      BOOST_TEST(std::equal(back.begin(), back.end(), st));
    }
    const double mse = se / ss;
    std::printf("K=%d  normalized MSE %.6f  (%.1f tiles/s)\n", K, mse, n_tiles / secs);
    BOOST_TEST(mse < prev);
    BOOST_TEST(mse >= lo[K]);
    BOOST_TEST(mse <= hi[K]);
    prev = mse;
  }
}

// Every instruction-set path this CPU runs (generic, AVX2, AVX-512) gives the same states
// and costs, bit for bit, on ordinary, tiny (fp16 subnormal) and huge (cost overflow to
// inf) tiles, for every K; prints each path's speed.
BOOST_AUTO_TEST_CASE(isa_paths_are_bit_identical) {
  std::mt19937 g(6);
  std::vector<viterbi_isa> isas;
  for (viterbi_isa i : {viterbi_isa::generic, viterbi_isa::avx2, viterbi_isa::avx512})
    if (viterbi_isa_supported(i)) isas.push_back(i);
  BOOST_TEST_MESSAGE("default path: " << viterbi_isa_name(default_viterbi_isa()));
  BOOST_CHECK_THROW(parse_viterbi_isa("sse9").value(), std::bad_optional_access);
  const float scales[3] = {1.0f, 1e-6f, 300.0f};
  for (codebook cb : {codebook::mul1, codebook::inst3}) {
    for (int K = 1; K <= 8; ++K) {
      if (cb == codebook::inst3 && K != 1 && K != 4 && K != 8) continue;  // the generic path is slow
      std::vector<float> w(256 * 3);
      for (int t = 0; t < 3; ++t)
        for (int i = 0; i < 256; ++i) w[256 * t + i] = random_half(g, scales[t]);
      std::vector<uint16_t> ref_s(256 * 3);
      std::vector<float> ref_q(256 * 3), ref_c(3);
      for (size_t n = 0; n < isas.size(); ++n) {
        const tile_coder c(cb, K, isas[n]);
        BOOST_TEST((c.isa() == isas[n]));
        std::vector<uint16_t> s(256 * 3);
        std::vector<float> q(256 * 3), cost(3);
        const auto t0 = std::chrono::steady_clock::now();
        encode_tiles(c, w.data(), 3, s.data(), q.data(), 1, cost.data());
        const double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (cb == codebook::mul1)
          std::printf("K=%d %-7s %.1f ms per tile (one thread)\n", K, viterbi_isa_name(isas[n]), secs / 3 * 1e3);
        if (n == 0) {
          ref_s = s, ref_q = q, ref_c = cost;
          continue;
        }
        BOOST_TEST_CONTEXT("K=" << K << " " << name(cb) << " " << viterbi_isa_name(isas[n])) {
          BOOST_TEST(s == ref_s);
          BOOST_TEST(std::equal(q.begin(), q.end(), ref_q.begin(), [](float a, float b) {
            return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
          }));
          BOOST_TEST(std::equal(cost.begin(), cost.end(), ref_c.begin(), [](float a, float b) {
            return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b);
          }));
        }
      }
    }
  }
}
