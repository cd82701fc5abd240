#define BOOST_TEST_MODULE suffix_drafter
#include <boost/test/unit_test.hpp>

#include <map>
#include <random>

#include "suffix_drafter.hpp"
#include "suffix_trie.hpp"

// drafter.suffix: the depth-bounded suffix trie against brute-force substring counts (after
// inserts, incremental appends and removals), the draft rule against a brute force over
// those counts, the global cache's eviction bounds and the per-request window.

using namespace tandem;
using ids = std::vector<int32_t>;

namespace {

// Occurrences of every substring of length 1..depth over `strings`.
std::map<ids, int64_t> brute_counts(const std::vector<ids>& strings, int depth) {
  std::map<ids, int64_t> c;
  for (const ids& s : strings)
    for (size_t i = 0; i < s.size(); ++i)
      for (size_t n = 1; n <= static_cast<size_t>(depth) && i + n <= s.size(); ++n)
        ++c[ids(s.begin() + static_cast<std::ptrdiff_t>(i), s.begin() + static_cast<std::ptrdiff_t>(i + n))];
  return c;
}

void check_counts(const suffix_trie& t, const std::vector<ids>& strings, int depth) {
  const auto want = brute_counts(strings, depth);
  int64_t total = 0;
  for (const ids& s : strings) total += static_cast<int64_t>(s.size());
  BOOST_TEST(t.count({}) == total);
  BOOST_TEST(t.nodes() == static_cast<int64_t>(want.size()));  // one node per distinct substring, none leaked
  for (const auto& [path, n] : want) BOOST_TEST_CONTEXT("path of " << path.size()) { BOOST_TEST(t.count(path) == n); }
}

ids random_ids(std::mt19937& rng, size_t n, int alphabet) {
  ids s(n);
  for (auto& x : s) x = static_cast<int32_t>(rng() % alphabet);
  return s;
}

// ArcticInference's rule from its description, over brute-force counts: for every suffix
// (< depth) that occurs, the most frequent next token (ties: lower id) again and again while
// the product of count(child) / count(parent) stays >= min_prob, at most
// min(max_tokens, factor * length); the highest score (sum of those products) wins, ties to
// the longer suffix.
ids brute_draft(const std::vector<ids>& strings, const ids& context, int depth, int max_tokens, double min_prob,
                double factor) {
  const auto c = brute_counts(strings, depth);
  auto count = [&](const ids& p) { auto it = c.find(p); return it == c.end() ? int64_t{0} : it->second; };
  auto best_next = [&](const ids& p) {
    int32_t best = -1;
    int64_t best_n = 0;
    for (const auto& [path, n] : c)
      if (path.size() == p.size() + 1 && std::equal(p.begin(), p.end(), path.begin()) &&
          (n > best_n || (n == best_n && path.back() < best)))
        best = path.back(), best_n = n;
    return std::pair{best, best_n};
  };
  ids best;
  double best_score = 0;
  for (int len = 1; len <= std::min<int>(static_cast<int>(context.size()), depth - 1); ++len) {
    ids p(context.end() - len, context.end());
    if (count(p) == 0) break;
    ids out;
    double prob = 1, score = 0;
    const int limit = std::min(max_tokens, static_cast<int>(factor * len + 1e-9));
    while (static_cast<int>(out.size()) < limit && static_cast<int>(p.size()) < depth) {
      auto [tok, n] = best_next(p);
      if (tok < 0) break;
      prob *= static_cast<double>(n) / static_cast<double>(count(p));
      if (prob < min_prob) break;
      out.push_back(tok);
      score += prob;
      p.push_back(tok);
    }
    if (!out.empty() && score >= best_score) best = out, best_score = score;
  }
  return best;
}

}  // namespace

BOOST_AUTO_TEST_CASE(counts_equal_brute_force_after_inserts_appends_and_removals) {
  std::mt19937 rng(11);
  for (int trial = 0; trial < 30; ++trial) {
    const int depth = 2 + static_cast<int>(rng() % 6);
    suffix_trie t(depth);
    std::vector<ids> strings;
    for (int i = 0; i < 5; ++i) {
      strings.push_back(random_ids(rng, 1 + rng() % 30, 3));
      t.insert(strings.back());
    }
    ids grown;  // indexed token by token
    auto cur = t.begin();
    for (int i = 0; i < 25; ++i) {
      grown.push_back(static_cast<int32_t>(rng() % 3));
      t.append(cur, grown.back());
    }
    strings.push_back(grown);
    BOOST_TEST_CONTEXT("trial " << trial << " depth " << depth) { check_counts(t, strings, depth); }
    t.remove(strings[1]);
    t.remove(strings[3]);
    strings.erase(strings.begin() + 3);
    strings.erase(strings.begin() + 1);
    BOOST_TEST_CONTEXT("trial " << trial << " after removals") { check_counts(t, strings, depth); }
    for (const ids& s : strings) t.remove(s);
    BOOST_TEST(t.nodes() == 0);
    BOOST_TEST(t.count({}) == 0);
  }
}

BOOST_AUTO_TEST_CASE(drafts_equal_brute_force) {
  std::mt19937 rng(5);
  for (int trial = 0; trial < 300; ++trial) {
    const int depth = 3 + static_cast<int>(rng() % 6);
    const double min_prob = (rng() % 4) * 0.15, factor = 0.5 + (rng() % 4) * 0.5;
    const int max_tokens = 1 + static_cast<int>(rng() % 8);
    std::vector<ids> strings{random_ids(rng, 5 + rng() % 40, 3), random_ids(rng, 5 + rng() % 40, 3)};
    suffix_trie t(depth);
    for (const ids& s : strings) t.insert(s);
    const ids context = random_ids(rng, 1 + rng() % 10, 3);
    const ids got = t.speculate(context, max_tokens, factor, min_prob).tokens;
    BOOST_TEST_CONTEXT("trial " << trial) {
      BOOST_TEST(got == brute_draft(strings, context, depth, max_tokens, min_prob, factor),
                 boost::test_tools::per_element());
    }
  }
}

BOOST_AUTO_TEST_CASE(the_drafter_continues_a_repetition_with_an_adaptive_length) {
  suffix_drafter d({.k = 16, .max_depth = 24, .max_spec_factor = 1.0, .min_token_prob = 0.1});
  ids t;
  for (int r = 0; r < 3; ++r)
    for (int32_t x = 10; x < 20; ++x) t.push_back(x);
  t.push_back(10);
  t.push_back(11);  // ... 10 11: the suffix "10 11" and longer ones occurred before
  draft_context ctx;
  ctx.tokens = t;
  ctx.max_draft = 16;
  const ids got = d.propose(1, ctx);
  BOOST_REQUIRE(!got.empty());
  // Every suffix continues the same way; the draft runs through the repetition.
  BOOST_TEST(got.size() >= 4u);
  for (size_t i = 0; i < got.size(); ++i) BOOST_TEST(got[i] == static_cast<int32_t>(10 + (2 + i) % 10));
  ctx.max_draft = 2;
  BOOST_TEST(d.propose(1, ctx).size() <= 2u);
  // Nothing repeats: no draft.
  const ids fresh{1, 2, 3, 4, 5};
  ctx.tokens = fresh;
  BOOST_TEST(d.propose(2, ctx).empty());
}

BOOST_AUTO_TEST_CASE(finished_outputs_feed_the_global_cache_within_its_bounds) {
  suffix_drafter d({.k = 8, .max_depth = 8, .max_spec_factor = 2.0, .min_token_prob = 0.1,
                    .max_request_tokens = 256, .max_cached_requests = 3, .max_cached_tokens = 40});
  const ids answer{50, 51, 52, 53, 54, 55, 56, 57};
  d.release(1, answer);
  BOOST_TEST(d.cached_requests() == 1);
  BOOST_TEST(d.live_sequences() == 0u);
  // A new request whose output starts like the cached one: the global trie drafts the rest.
  const ids t{7, 8, 9, 50, 51, 52};
  draft_context ctx;
  ctx.tokens = t;
  ctx.max_draft = 8;
  BOOST_TEST(d.propose(2, ctx) == (ids{53, 54, 55, 56, 57}), boost::test_tools::per_element());
  // Bounds: at most 3 requests and 40 tokens; the oldest go first and leave no nodes.
  for (int r = 0; r < 6; ++r) d.release(100 + r, ids(12, static_cast<int32_t>(r)));
  BOOST_TEST(d.cached_requests() == 3);
  BOOST_TEST(d.cached_tokens() == 36);
  BOOST_TEST(d.global_trie().count(ids{50}) == 0);
  suffix_trie fresh(8);
  for (int r = 3; r < 6; ++r) fresh.insert(ids(12, static_cast<int32_t>(r)));
  BOOST_TEST(d.global_trie().nodes() == fresh.nodes());
  d.release(200, ids(41, 1));  // longer than the whole cache: not kept, nothing evicted for it
  BOOST_TEST(d.cached_requests() == 3);
}

BOOST_AUTO_TEST_CASE(a_request_trie_keeps_only_its_window) {
  suffix_drafter d({.k = 4, .max_depth = 4, .max_spec_factor = 4.0, .min_token_prob = 0.0,
                    .max_request_tokens = 256, .max_cached_requests = 0, .max_cached_tokens = 0});
  ids t{900, 901, 902, 903};  // occurs only at the very start
  for (int i = 0; i < 400; ++i) t.push_back(static_cast<int32_t>(i % 7));
  t.push_back(900);
  draft_context ctx;
  ctx.tokens = t;
  ctx.max_draft = 4;
  BOOST_TEST(d.propose(1, ctx).empty());  // "900" fell out of the 256-token window
  t.push_back(1);
  t.push_back(2);
  ctx.tokens = t;
  BOOST_TEST(!d.propose(1, ctx).empty());  // "... 1 2" is in it
}
