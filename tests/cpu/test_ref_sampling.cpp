#define BOOST_TEST_MODULE ref_sampling
#include <boost/test/unit_test.hpp>

#include <cmath>
#include <map>
#include <random>
#include <set>
#include <vector>

#include "tandem/error.hpp"
#include "tandem_ref/philox.hpp"
#include "tandem_ref/sampling.hpp"

// The reference sampler: Philox known answers, greedy, filters, determinism, frequencies.
using namespace tandem;

namespace {

std::vector<float> logits_of(std::mt19937& rng, int vocab) {
  std::normal_distribution<float> d(0.0f, 2.0f);
  std::vector<float> l(static_cast<size_t>(vocab));
  for (auto& x : l) x = d(rng);
  return l;
}

sampling_params temp(float t, uint64_t seed, uint64_t step) {
  sampling_params p;
  p.temperature = t;
  p.seed = seed;
  p.step = step;
  return p;
}

std::vector<double> softmax(const std::vector<float>& l, float t) {
  double mx = -INFINITY, sum = 0.0;
  for (float x : l) mx = std::max<double>(mx, x);
  std::vector<double> p;
  for (float x : l) sum += p.emplace_back(std::exp((x - mx) / t));
  for (auto& x : p) x /= sum;
  return p;
}

}  // namespace

BOOST_AUTO_TEST_CASE(philox_matches_random123_known_answers) {
  using ref::philox4x32_10;
  BOOST_TEST((philox4x32_10({0, 0, 0, 0}, {0, 0}) ==
              ref::philox_counter{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  BOOST_TEST((philox4x32_10({~0u, ~0u, ~0u, ~0u}, {~0u, ~0u}) ==
              ref::philox_counter{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  BOOST_TEST((philox4x32_10({0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u},
                            {0xa4093822u, 0x299f31d0u}) ==
              ref::philox_counter{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

BOOST_AUTO_TEST_CASE(greedy_picks_argmax_lowest_id_on_ties) {
  const std::vector<float> l{1.0f, 5.0f, -2.0f, 5.0f, NAN};
  BOOST_TEST(ref::sample_row(l.data(), 5, {}) == 1);
  sampling_params k1 = temp(1.5f, 3, 0);
  k1.top_k = 1;
  BOOST_TEST(ref::sample_row(l.data(), 5, k1) == 1);
  const std::vector<float> bad{NAN, -INFINITY};
  BOOST_CHECK_THROW(ref::sample_row(bad.data(), 2, {}), error);
  BOOST_CHECK_THROW(ref::sample_row(bad.data(), 2, temp(1.0f, 0, 0)), error);
}

BOOST_AUTO_TEST_CASE(top_k_1_equals_greedy_on_random_rows) {
  std::mt19937 rng(11);
  for (int i = 0; i < 50; ++i) {
    const auto l = logits_of(rng, 1000);
    sampling_params p = temp(0.8f, i, i);
    p.top_k = 1;
    BOOST_TEST(ref::sample_row(l.data(), 1000, p) == ref::argmax_row(l.data(), 1000));
    // Also through filter_row: a top_p this small keeps only the argmax.
    sampling_params q = temp(0.8f, i, i);
    q.top_p = 1e-6f;
    BOOST_TEST(ref::sample_row(l.data(), 1000, q) == ref::argmax_row(l.data(), 1000));
  }
}

BOOST_AUTO_TEST_CASE(same_seed_and_step_same_token_seeds_differ) {
  std::mt19937 rng(5);
  const auto l = logits_of(rng, 5000);
  int differ = 0;
  for (uint64_t s = 0; s < 200; ++s) {
    const int32_t a = ref::sample_row(l.data(), 5000, temp(1.0f, s, 7));
    BOOST_TEST(a == ref::sample_row(l.data(), 5000, temp(1.0f, s, 7)));
    differ += a != ref::sample_row(l.data(), 5000, temp(1.0f, s + 1000, 7));
  }
  BOOST_TEST(differ > 150);  // 5000 tokens at T = 1: collisions are rare
}

BOOST_AUTO_TEST_CASE(top_k_top_p_min_p_never_leave_the_allowed_set) {
  std::mt19937 rng(21);
  const int vocab = 300;
  const auto l = logits_of(rng, vocab);
  const auto p = softmax(l, 0.7f);
  std::vector<int> rank(vocab);
  for (int i = 0; i < vocab; ++i) rank[i] = i;
  std::sort(rank.begin(), rank.end(), [&](int a, int b) { return p[a] > p[b]; });
  // Allowed sets computed independently from the sorted softmax.
  std::set<int> top_k(rank.begin(), rank.begin() + 10);
  std::set<int> top_p;
  double cum = 0.0;
  for (size_t i = 0; cum < 0.6; ++i) {
    top_p.insert(rank[i]);
    cum += p[rank[i]];
  }
  std::set<int> min_p;
  for (int i = 0; i < vocab; ++i) {
    if (p[i] >= 0.2 * p[rank[0]]) min_p.insert(i);
  }
  BOOST_TEST_REQUIRE(top_p.size() > 1);
  BOOST_TEST_REQUIRE(min_p.size() > 1);
  std::set<int> seen_k, seen_p, seen_m;
  for (uint64_t step = 0; step < 10000; ++step) {
    sampling_params a = temp(0.7f, 99, step), b = a, c = a;
    a.top_k = 10;
    b.top_p = 0.6f;
    c.min_p = 0.2f;
    seen_k.insert(ref::sample_row(l.data(), vocab, a));
    seen_p.insert(ref::sample_row(l.data(), vocab, b));
    seen_m.insert(ref::sample_row(l.data(), vocab, c));
  }
  BOOST_TEST((seen_k == top_k));  // every allowed token shows up in 10k draws, no other
  BOOST_TEST(std::includes(top_p.begin(), top_p.end(), seen_p.begin(), seen_p.end()));
  BOOST_TEST(std::includes(min_p.begin(), min_p.end(), seen_m.begin(), seen_m.end()));
  BOOST_TEST(seen_p.size() > 1);
  BOOST_TEST(seen_m.size() > 1);
}

BOOST_AUTO_TEST_CASE(frequencies_match_softmax) {
  const std::vector<float> l{0.0f, 1.0f, 2.0f, -1.0f, 0.5f, 1.5f, -3.0f, 0.2f};
  const float t = 1.3f;
  const auto p = softmax(l, t);
  const int n = 20000;
  std::vector<int> count(l.size(), 0);
  for (int i = 0; i < n; ++i) ++count[ref::sample_row(l.data(), 8, temp(t, 1234, i))];
  double chi2 = 0.0;
  for (size_t i = 0; i < l.size(); ++i) chi2 += std::pow(count[i] - n * p[i], 2) / (n * p[i]);
  // 7 degrees of freedom: P(chi2 > 24.3) = 0.001.
  BOOST_TEST(chi2 < 24.3);
}
