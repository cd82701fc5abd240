// Trellis tiles and codebooks against the spec's worked example (exl3.md §3.4) and an
// independent bit-by-bit model of the ring (§3.2 steps 1-3).
#define BOOST_TEST_MODULE exl3_trellis
#include <boost/test/unit_test.hpp>

#include <array>
#include <random>
#include <set>
#include <stdexcept>
#include <vector>

#include "tandem_exl3/trellis.hpp"

using namespace tandem::exl3;

namespace {

// Stream bit q of a tile, read one bit at a time (no word tricks).
int ring_bit(const uint16_t* tile, int K, int q) {
  const int L = 256 * K;
  q = ((q % L) + L) % L;
  const int m = q / 32, b = q % 32;
  const uint32_t wd = uint32_t(tile[2 * m]) | uint32_t(tile[2 * m + 1]) << 16;
  return (wd >> (31 - b)) & 1;
}

uint16_t naive_state(const uint16_t* tile, int K, int p) {
  uint32_t s = 0;
  for (int q = (p + 1) * K - 16; q < (p + 1) * K; ++q) s = s << 1 | ring_bit(tile, K, q);
  return static_cast<uint16_t>(s);
}

// A random tail-biting sequence: random K-bit chunks, states built around the ring.
std::array<uint16_t, 256> random_states(std::mt19937& rng, int K) {
  std::array<uint16_t, 256> chunk{}, s{};
  for (auto& c : chunk) c = static_cast<uint16_t>(rng() & ((1u << K) - 1));
  uint32_t st = 0;
  for (int round = 0; round < 2; ++round)  // the second lap fixes s_0's wrapped bits
    for (int p = 0; p < 256; ++p) s[p] = static_cast<uint16_t>(st = ((st << K) | chunk[p]) & 0xffff);
  return s;
}

std::vector<uint16_t> worked_example_tile() {
  // K = 4, chunk_p = p mod 16: stream words 0x0123 0x4567 0x89AB 0xCDEF ..., pairs swapped.
  const uint16_t stream[4] = {0x0123, 0x4567, 0x89AB, 0xCDEF};
  std::vector<uint16_t> t(64);
  for (int i = 0; i < 64; i += 2) {
    t[i] = stream[(i + 1) % 4];
    t[i + 1] = stream[i % 4];
  }
  return t;
}

}  // namespace

BOOST_AUTO_TEST_CASE(codebook_test_vectors) {
  struct row { uint16_t s, inst3, mcg, mul1; };
  const row rows[] = {{0x0123, 0xB950, 0xBF27, 0xB4CB},
                      {0x0000, 0x3A25, 0x3F60, 0xC2E8},
                      {0xDEF0, 0xBC1A, 0x42DE, 0xC006},
                      {0x4567, 0x3F34, 0x3CF4, 0xBD95},
                      {0xFFFF, 0xB110, 0x3ACD, 0xB936}};
  for (const row& r : rows) {
    BOOST_TEST(decode_bits(codebook::inst3, r.s) == r.inst3);
    BOOST_TEST(decode_bits(codebook::mcg, r.s) == r.mcg);
    BOOST_TEST(decode_bits(codebook::mul1, r.s) == r.mul1);
    for (codebook cb : {codebook::inst3, codebook::mcg, codebook::mul1})
      BOOST_TEST(decode_table(cb)[r.s] == decode_bits(cb, r.s));
  }
  BOOST_TEST(decode(codebook::inst3, 0x0123) == -0.6640625f);
  BOOST_TEST(decode(codebook::mcg, 0x0123) == -1.7880859375f);
  BOOST_TEST(decode(codebook::mul1, 0x0123) == -0.299560546875f);
}

BOOST_AUTO_TEST_CASE(placements) {
  const int p_r_c[][3] = {{0, 0, 0},  {1, 1, 0},  {2, 8, 0},  {3, 9, 0},   {4, 0, 8},
                          {7, 9, 8},  {8, 2, 0},  {32, 0, 1}, {255, 15, 15}};
  for (const auto& e : p_r_c) {
    BOOST_TEST(position_to_rc(e[0]).r == e[1]);
    BOOST_TEST(position_to_rc(e[0]).c == e[2]);
  }
  std::set<int> seen;
  for (int p = 0; p < 256; ++p) {
    const tile_rc rc = position_to_rc(p);
    BOOST_TEST_REQUIRE((rc.r >= 0 && rc.r < 16 && rc.c >= 0 && rc.c < 16));
    seen.insert(rc.r * 16 + rc.c);
    BOOST_TEST(rc_to_position(rc.r, rc.c) == p);
  }
  BOOST_TEST(seen.size() == 256u);  // a bijection onto the tile
}

BOOST_AUTO_TEST_CASE(worked_example_states) {
  const auto tile = worked_example_tile();
  BOOST_TEST(tile[0] == 0x4567);
  BOOST_TEST(tile[1] == 0x0123);
  BOOST_TEST(tile[2] == 0xCDEF);
  BOOST_TEST(tile[3] == 0x89AB);
  uint16_t s[256];
  unpack_tile_states(tile.data(), 4, s);
  BOOST_TEST(s[0] == 0xDEF0);
  BOOST_TEST(s[1] == 0xEF01);
  BOOST_TEST(s[3] == 0x0123);
  BOOST_TEST(s[7] == 0x4567);
  BOOST_TEST(s[255] == 0xCDEF);
  BOOST_TEST(is_tail_biting(s, 4));
  // Packing the states gives the same words back.
  uint16_t again[64];
  pack_tile_states(s, 4, again);
  for (int i = 0; i < 64; ++i) BOOST_TEST(again[i] == tile[i]);
  // Decode places s_3 = 0x0123 at (9, 0) and s_0 = 0xDEF0 at (0, 0).
  uint16_t w[16][16];
  decode_tile(codebook::mul1, tile.data(), 4, w);
  BOOST_TEST(w[9][0] == 0xB4CB);
  BOOST_TEST(w[0][0] == 0xC006);
  decode_tile(codebook::inst3, tile.data(), 4, w);
  BOOST_TEST(w[9][0] == 0xB950);
  BOOST_TEST(w[9][8] == 0x3F34);  // p = 7: s = 0x4567
}

BOOST_AUTO_TEST_CASE(unpack_matches_bitwise_ring_on_random_words) {
  std::mt19937 rng(7);
  for (int K = 1; K <= 8; ++K)
    for (int trial = 0; trial < 20; ++trial) {
      std::vector<uint16_t> tile(tile_words(K));
      for (auto& w : tile) w = static_cast<uint16_t>(rng());
      uint16_t s[256];
      unpack_tile_states(tile.data(), K, s);
      for (int p = 0; p < 256; ++p) BOOST_TEST_REQUIRE(s[p] == naive_state(tile.data(), K, p));
      // Any word content decodes to a tail-biting sequence (the invariant of §3.2).
      BOOST_TEST_REQUIRE(is_tail_biting(s, K));
      BOOST_TEST((s[0] >> K) == (s[255] & ((1u << (16 - K)) - 1)));
    }
}

BOOST_AUTO_TEST_CASE(pack_unpack_round_trip) {
  std::mt19937 rng(11);
  for (int K = 1; K <= 8; ++K)
    for (int trial = 0; trial < 50; ++trial) {
      const auto states = random_states(rng, K);
      BOOST_TEST_REQUIRE(is_tail_biting(states.data(), K));
      std::vector<uint16_t> tile(tile_words(K));
      pack_tile_states(states.data(), K, tile.data());
      uint16_t back[256];
      unpack_tile_states(tile.data(), K, back);
      for (int p = 0; p < 256; ++p) BOOST_TEST_REQUIRE(back[p] == states[p]);
      // Words -> states -> words is the identity too.
      std::vector<uint16_t> again(tile_words(K));
      pack_tile_states(back, K, again.data());
      BOOST_TEST_REQUIRE(again == tile);
    }
}

BOOST_AUTO_TEST_CASE(tail_biting_detects_a_broken_sequence) {
  std::mt19937 rng(3);
  for (int K = 1; K <= 8; ++K) {
    auto s = random_states(rng, K);
    s[100] ^= 0x8000;  // an upper bit that the predecessor fixes
    BOOST_TEST(!is_tail_biting(s.data(), K));
  }
}

BOOST_AUTO_TEST_CASE(bad_bit_counts_throw) {
  uint16_t tile[160] = {}, s[256] = {};
  BOOST_CHECK_THROW(unpack_tile_states(tile, 0, s), std::invalid_argument);
  BOOST_CHECK_THROW(unpack_tile_states(tile, 9, s), std::invalid_argument);
  BOOST_CHECK_THROW(pack_tile_states(s, 9, tile), std::invalid_argument);
  BOOST_CHECK_THROW(is_tail_biting(s, -1), std::invalid_argument);
}
