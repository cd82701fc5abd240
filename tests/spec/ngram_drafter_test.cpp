#define BOOST_TEST_MODULE ngram_drafter
#include <boost/test/unit_test.hpp>

#include <random>

#include "ngram_drafter.hpp"

// drafter.ngram's rule: the k tokens after the most recent earlier occurrence of the
// longest suffix n-gram, n from max_n down to min_n; checked case by case and against a
// brute force written from that sentence.

using namespace tandem;
using ids = std::vector<int32_t>;

BOOST_AUTO_TEST_CASE(the_longest_suffix_wins_over_a_more_recent_shorter_one) {
  // suffix "1 2 3" occurs at 0 (followed by 7 8); "2 3" alone occurs more recently at 5 (then 9).
  const ids t{1, 2, 3, 7, 8, 2, 3, 9, 1, 2, 3};
  BOOST_TEST(ngram_lookup(t, 1, 3, 2) == (ids{7, 8}), boost::test_tools::per_element());
  BOOST_TEST(ngram_lookup(t, 1, 2, 2) == (ids{9, 1}), boost::test_tools::per_element());  // max_n 2: "2 3" at 5
}

BOOST_AUTO_TEST_CASE(the_most_recent_match_of_equal_length_wins) {
  const ids t{5, 1, 5, 2, 5};  // "5" at 0 (then 1) and at 2 (then 2): the later one
  BOOST_TEST(ngram_lookup(t, 1, 1, 3) == (ids{2, 5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(no_match_below_min_n_and_none_for_the_suffix_itself) {
  const ids t{1, 2, 3, 4, 3};
  BOOST_TEST(ngram_lookup(t, 2, 4, 4).empty());                                      // only a 1-gram matches
  BOOST_TEST(ngram_lookup(t, 1, 4, 4) == (ids{4, 3}), boost::test_tools::per_element());  // clipped at the end
  BOOST_TEST(ngram_lookup(ids{7}, 1, 4, 4).empty());
  BOOST_TEST(ngram_lookup(ids{}, 1, 4, 4).empty());
  BOOST_TEST(ngram_lookup(ids{7, 7}, 1, 4, 0).empty());
}

BOOST_AUTO_TEST_CASE(a_repetition_is_continued_through_its_own_tail) {
  const ids t{4, 5, 6, 4, 5, 6, 4, 5};
  BOOST_TEST(ngram_lookup(t, 1, 4, 5) == (ids{6, 4, 5}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(matches_a_brute_force_on_random_sequences) {
  std::mt19937 rng(3);
  for (int trial = 0; trial < 500; ++trial) {
    ids t(1 + rng() % 40);
    for (auto& x : t) x = static_cast<int32_t>(rng() % 4);
    const int min_n = 1 + static_cast<int>(rng() % 3), max_n = min_n + static_cast<int>(rng() % 3), k = 1 + static_cast<int>(rng() % 6);
    ids want;
    const int len = static_cast<int>(t.size());
    for (int n = max_n; n >= min_n && want.empty(); --n) {
      if (n >= len) continue;
      int best = -1;
      for (int j = 0; j + n < len; ++j) {
        bool eq = true;
        for (int i = 0; i < n; ++i) eq = eq && t[j + i] == t[len - n + i];
        if (eq && j + n <= len - 1 && j < len - n) best = j;  // latest start before the suffix's own
      }
      if (best >= 0)
        for (int i = best + n; i < std::min(len, best + n + k); ++i) want.push_back(t[i]);
    }
    BOOST_TEST_CONTEXT("trial " << trial) {
      BOOST_TEST(ngram_lookup(t, min_n, max_n, k) == want, boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_drafter_honours_max_draft_and_rejects_min_above_max) {
  ngram_drafter d({.min_n = 1, .max_n = 3, .k = 4, .disable_above_batch = 2});
  const ids t{1, 2, 3, 4, 5, 6, 1, 2};
  draft_context ctx;
  ctx.tokens = t;
  ctx.max_draft = 2;
  BOOST_TEST(d.propose(1, ctx) == (ids{3, 4}), boost::test_tools::per_element());
  ctx.max_draft = 10;
  BOOST_TEST(d.propose(1, ctx).size() == 4u);  // k caps it
  BOOST_TEST(d.limits().max_draft == 4);
  BOOST_TEST(d.limits().disable_above_batch == 2);
}
