#define BOOST_TEST_MODULE step_plan
#include <boost/test/unit_test.hpp>

#include <random>

#include "tandem/error.hpp"
#include "tandem/step_plan.hpp"

using namespace tandem;

BOOST_AUTO_TEST_CASE(round_trip) {
  step_plan p;
  p.step = 42;
  step_seq a;
  a.request_id = 7;
  a.start_pos = 3;
  a.tokens = {1, 2, 3};
  a.pages = {9, 4};
  a.sample = true;
  a.sampling.temperature = 0.7f;
  a.sampling.seed = 1234;
  p.seqs = {a, step_seq{}};
  step_plan q = decode_step_plan(encode(p));
  BOOST_TEST(q.step == 42u);
  BOOST_REQUIRE(q.seqs.size() == 2u);
  BOOST_TEST(q.seqs[0].tokens == a.tokens);
  BOOST_TEST(q.seqs[0].pages == a.pages);
  BOOST_TEST(q.seqs[0].sample);
  BOOST_TEST(q.seqs[0].sampling.seed == 1234u);
  BOOST_TEST(q.seqs[0].sampling.temperature == 0.7f);
  BOOST_TEST(q.n_tokens() == 3);
}

BOOST_AUTO_TEST_CASE(malformed_bytes_are_rejected_not_crashed_on) {
  step_plan p;
  step_seq a;
  a.tokens = {1, 2, 3};
  a.pages = {0};
  p.seqs = {a, a};
  const std::vector<uint8_t> good = encode(p);
  for (size_t cut = 0; cut < good.size(); ++cut)
    BOOST_CHECK_THROW(decode_step_plan(std::span(good.data(), cut)), error);
  std::mt19937 rng(1);
  for (int i = 0; i < 5000; ++i) {
    std::vector<uint8_t> bad = good;
    bad[rng() % bad.size()] = static_cast<uint8_t>(rng());
    try {
      decode_step_plan(bad);
    } catch (const error&) {
    }
  }
  std::vector<uint8_t> extra = good;
  extra.push_back(0);
  BOOST_CHECK_THROW(decode_step_plan(extra), error);
}
