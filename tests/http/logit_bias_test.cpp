// logit_bias in the engine's host-side sampling: +100 forces a token, -100 bans it, for the
// greedy and the random sampler alike.
#define BOOST_TEST_MODULE logit_bias
#include <boost/test/unit_test.hpp>

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
