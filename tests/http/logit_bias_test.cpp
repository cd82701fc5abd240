// logit_bias in the engine's host-side sampling: +100 forces a token, -100 bans it, for the
// greedy and the random sampler alike; and logprobs against a long-double reference.
#define BOOST_TEST_MODULE logit_bias
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "logit_processing.hpp"

using namespace tandem;

namespace {

std::vector<float> ramp(int vocab) {
  std::vector<float> l(vocab);
  for (int i = 0; i < vocab; ++i) l[i] = 0.1f * static_cast<float>(i);  // the last token is the argmax
  return l;
}

}  // namespace

BOOST_AUTO_TEST_CASE(bias_forces_and_bans) {
  const int vocab = 64;
  const auto logits = ramp(vocab);
  generation_request r;
  sampling_params greedy;
  BOOST_TEST(sample_with_penalties(logits.data(), vocab, r, greedy, {}) == vocab - 1);
  BOOST_TEST(!has_penalties(r));
  r.logit_bias = {{7, 100.0f}};
  BOOST_TEST(has_penalties(r));  // drawn on the host, from the edited row
  BOOST_TEST(sample_with_penalties(logits.data(), vocab, r, greedy, {}) == 7);
  r.logit_bias = {{vocab - 1, -100.0f}};
  BOOST_TEST(sample_with_penalties(logits.data(), vocab, r, greedy, {}) == vocab - 2);
  // Random draws: +100 wins every time, a banned token never appears.
  sampling_params hot;
  hot.temperature = 1.0f;
  for (uint64_t step = 0; step < 200; ++step) {
    hot.seed = 11;
    hot.step = step;
    r.logit_bias = {{3, 100.0f}};
    BOOST_TEST(sample_with_penalties(logits.data(), vocab, r, hot, {}) == 3);
    r.logit_bias = {{vocab - 1, -100.0f}, {vocab - 2, -100.0f}};
    const int32_t t = sample_with_penalties(logits.data(), vocab, r, hot, {});
    BOOST_TEST((t != vocab - 1 && t != vocab - 2));
  }
  // Ids outside the row are skipped, not written.
  r.logit_bias = {{vocab + 5, 100.0f}};
  BOOST_TEST(sample_with_penalties(logits.data(), vocab, r, greedy, {}) == vocab - 1);
}

BOOST_AUTO_TEST_CASE(prompt_logprobs_match_the_token_logprobs) {
  const int vocab = 16;
  const auto logits = ramp(vocab);
  token_event ev;
  prompt_token_logprob lp;
  fill_logprobs(logits.data(), vocab, 5, 3, ev);
  fill_logprobs(logits.data(), vocab, 5, 3, lp);
  BOOST_TEST(ev.logprob == lp.logprob);
  BOOST_TEST(lp.logprob < 0.0f);
  BOOST_REQUIRE(lp.top.size() == 3u);
  BOOST_TEST(lp.top[0].first == vocab - 1);
}

// Logprobs (fill_logprobs) against a long-double log-softmax and a full sort, on rows of the
// default model's vocabulary width with impossible tokens (-inf, +inf and NaN logits count
// as -inf), ties (the lower id first) and rows with nothing possible.
namespace {

struct reference {
  long double log_z = 0;
  std::vector<std::pair<int32_t, float>> top;  // (id, logprob), best first, ties to the lower id
};

reference naive(const std::vector<float>& l, int top) {
  reference r;
  long double mx = -INFINITY, sum = 0;
  for (float v : l)
    if (std::isfinite(v)) mx = std::max<long double>(mx, v);
  for (float v : l)
    if (std::isfinite(v)) sum += std::exp(static_cast<long double>(v) - mx);
  r.log_z = mx + std::log(sum);
  std::vector<int32_t> ids(l.size());
  std::iota(ids.begin(), ids.end(), 0);
  auto key = [&](int32_t i) { return std::isfinite(l[i]) ? l[i] : -INFINITY; };
  std::stable_sort(ids.begin(), ids.end(), [&](int32_t a, int32_t b) { return key(a) > key(b); });
  for (int i = 0; i < std::min<int>(top, static_cast<int>(l.size())); ++i)
    r.top.emplace_back(ids[i], std::isfinite(l[ids[i]]) ? static_cast<float>(l[ids[i]] - r.log_z) : -INFINITY);
  return r;
}

void check_row(const std::vector<float>& l, int32_t token, int top, const std::string& what) {
  token_event ev;
  fill_logprobs(l.data(), static_cast<int>(l.size()), token, top, ev);
  const reference r = naive(l, top);
  const float want = std::isfinite(l[token]) ? static_cast<float>(l[token] - r.log_z) : -INFINITY;
  if (std::isfinite(want)) BOOST_TEST(std::fabs(ev.logprob - want) < 2e-5, what << ": logprob " << ev.logprob << " vs " << want);
  else BOOST_TEST(ev.logprob == -INFINITY, what);
  BOOST_TEST_REQUIRE(ev.top_logprobs.size() == r.top.size(), what);
  for (size_t i = 0; i < r.top.size(); ++i) {
    BOOST_TEST(ev.top_logprobs[i].first == r.top[i].first, what << ": top " << i);
    const float g = ev.top_logprobs[i].second, w = r.top[i].second;
    if (std::isfinite(w)) BOOST_TEST(std::fabs(g - w) < 2e-5, what << ": top " << i << " " << g << " vs " << w);
    else BOOST_TEST(g == -INFINITY, what << ": top " << i);
  }
}

}  // namespace

BOOST_AUTO_TEST_CASE(logprobs_match_a_long_double_reference) {
  std::mt19937 rng(5);
  const int vocab = 49152;
  for (float spread : {0.5f, 3.0f, 12.0f, 40.0f}) {
    std::normal_distribution<float> nd(0.0f, spread);
    std::vector<float> l(vocab);
    for (float& v : l) v = nd(rng);
    l[17] = -INFINITY, l[18] = INFINITY, l[19] = NAN;
    for (int top : {0, 1, 5, 20}) {
      check_row(l, 3, top, "spread " + std::to_string(spread) + " top " + std::to_string(top));
      check_row(l, 19, top, "the NaN token");
    }
  }
  // Ties: eight equal best logits, and a row of equal values.
  std::vector<float> ties(vocab, -2.0f);
  for (int i : {900, 40, 7000, 41, 5, 30000, 12, 49151}) ties[i] = 3.5f;
  check_row(ties, 40, 10, "eight tied best");
  check_row(std::vector<float>(vocab, 1.25f), 100, 20, "a flat row");
  // Nothing possible: every logprob is -inf, the top list the lowest ids.
  std::vector<float> none(64, -INFINITY);
  none[3] = NAN;
  check_row(none, 3, 5, "no finite logit");
  // top beyond the vocabulary is clamped.
  check_row(std::vector<float>{1.0f, 2.0f, 0.5f}, 1, 20, "top > vocab");
}
