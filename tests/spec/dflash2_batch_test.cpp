#define BOOST_TEST_MODULE dflash2_batch
#include <boost/test/unit_test.hpp>

#include <algorithm>
#include <cmath>
#include <random>

#include "dflash2_test_util.hpp"
#include "tandem/error.hpp"

// drafter.dflash2's batched drafting (propose_batch: one block forward over several
// sequences) against drafting one sequence at a time: 1, 3 and 8 sequences of different
// context lengths (inside and past the context window, with a gap, with taps still pending)
// and different draft lengths give the same drafts and logits, in a first step and in a
// second after each sequence accepted a few more tokens. A sequence with nothing observed
// drafts nothing in a batch too.

using namespace dflash2_test;

namespace {

// One simulated sequence: random taps for every position, the tokens it has so far.
struct sim_sequence {
  uint64_t id = 0;
  int64_t length = 0;   // tokens so far; the newest (the anchor) is not observed yet
  int64_t gap_from = -1, gap_to = -1;  // positions never observed (the prefix cache's), or none
  int max_draft = 0;
  std::vector<std::vector<float>> taps;  // per tap, [capacity, d]
  std::vector<int32_t> tokens;
};

class batch_fixture {
 public:
  explicit batch_fixture(int sequences) : case_(fixture_dir() / "case.safetensors") {
    one_ = make_drafter(one_target_);
    batched_ = make_drafter(batched_target_);
    const dflash2_config& c = one_->config();
    std::mt19937 rng(sequences);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int32_t> token(0, static_cast<int32_t>(c.target.vocab_size) - 1);
    for (int s = 0; s < sequences; ++s) {
      sim_sequence q;
      q.id = 100 + static_cast<uint64_t>(s) * 7;
      // 3 .. about 80 tokens: shorter and longer than the window (24 in the fixture).
      q.length = 3 + (s * 37) % 80;
      if (s % 3 == 1 && q.length > 12) q.gap_from = 2, q.gap_to = 6;
      // 1 .. block_size - 1 drafts, and one asking for more than a block holds.
      q.max_draft = s == 5 ? 64 : 1 + s % (c.block_size - 1);
      q.taps.resize(static_cast<size_t>(c.taps()));
      for (auto& t : q.taps) {
        t.resize(static_cast<size_t>((q.length + 16) * c.hidden_size));
        for (float& x : t) x = normal(rng);
      }
      for (int64_t i = 0; i < q.length + 16; ++i) q.tokens.push_back(token(rng));
      seqs_.push_back(std::move(q));
    }
    for (sim_sequence& q : seqs_) {
      // The prompt as one chunk (around the gap), the last two committed rows one at a time
      // (they stay pending until a block needs them).
      const int64_t committed = q.length - 1;
      const int64_t chunk_end = std::max<int64_t>(0, committed - 2);
      if (q.gap_from >= 0) {
        observe(q, 0, q.gap_from);
        observe(q, q.gap_to, chunk_end);
      } else {
        observe(q, 0, chunk_end);
      }
      for (int64_t p = chunk_end; p < committed; ++p) observe(q, p, p + 1);
    }
  }

  // The requests of the current step (each sequence's tokens so far).
  std::vector<draft_request> requests() const {
    std::vector<draft_request> r;
    for (const sim_sequence& q : seqs_)
      r.push_back({q.id, {.tokens = std::span<const int32_t>(q.tokens).first(static_cast<size_t>(q.length)),
                          .prompt_len = 1, .max_draft = q.max_draft}});
    return r;
  }

  // Compares one step: the batched drafter's drafts and logits with the other's one at a time.
  void check_step() {
    const std::vector<draft_request> reqs = requests();
    const std::vector<dflash2::block_output> batched = batched_->draft_batch(reqs, /*logits=*/true);
    BOOST_REQUIRE(batched.size() == reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) {
      BOOST_TEST_CONTEXT("sequence " << i << " of " << reqs.size() << ", " << seqs_[i].length << " tokens, max_draft "
                                     << seqs_[i].max_draft) {
        const std::vector<dflash2::block_output> one = one_->draft_batch(std::span(reqs).subspan(i, 1), true);
        const int expect = std::min(seqs_[i].max_draft, one_->config().block_size - 1);
        BOOST_TEST(static_cast<int>(one[0].draft.size()) == expect);  // every sequence here has context
        BOOST_TEST(batched[i].draft == one[0].draft, boost::test_tools::per_element());
        BOOST_REQUIRE(batched[i].logits.size() == one[0].logits.size());
        float err = 0, scale = 1;
        for (size_t j = 0; j < one[0].logits.size(); ++j) {
          err = std::max(err, std::abs(batched[i].logits[j] - one[0].logits[j]));
          scale = std::max(scale, std::abs(one[0].logits[j]));
        }
        BOOST_TEST(err <= 1e-5f * scale);
        // propose() alone gives that draft too.
        BOOST_TEST(one_->propose(reqs[i].seq_id, reqs[i].ctx) == one[0].draft, boost::test_tools::per_element());
      }
    }
    // propose_batch() is draft_batch's drafts.
    const std::vector<std::vector<int32_t>> drafts = batched_->propose_batch(reqs);
    BOOST_REQUIRE(drafts.size() == reqs.size());
    for (size_t i = 0; i < reqs.size(); ++i) BOOST_TEST(drafts[i] == batched[i].draft, boost::test_tools::per_element());
  }

  // The next step: each sequence accepted 1 .. 3 tokens (the anchor and those get observed).
  void accept_some() {
    for (size_t i = 0; i < seqs_.size(); ++i) {
      sim_sequence& q = seqs_[i];
      const int64_t accepted = 1 + static_cast<int64_t>(i % 3);
      observe(q, q.length - 1, q.length - 1 + accepted);
      q.length += accepted;
    }
  }

  dflash2_drafter& batched() { return *batched_; }

 private:
  std::unique_ptr<dflash2_drafter> make_drafter(std::unique_ptr<cpu_target>& target) {
    auto d = std::make_unique<dflash2_drafter>(settings_for(fixture_dir()));
    target = std::make_unique<cpu_target>(d->config(), info_of(*case_.find("target_embedding")),
                                          info_of(*case_.find("target_head")));
    d->bind(target->target);
    return d;
  }
  // Both drafters observe positions [from, to) of q.
  void observe(const sim_sequence& q, int64_t from, int64_t to) {
    if (to <= from) return;
    const int64_t d = one_->config().hidden_size;
    std::vector<tensor_view> views;
    for (const auto& t : q.taps)
      views.push_back(tensor_view::contiguous(const_cast<float*>(t.data()) + from * d, dtype::f32, {to - from, d}));
    one_->observe(q.id, from, views);
    batched_->observe(q.id, from, views);
  }

  safetensors::safetensors_file case_;
  std::unique_ptr<cpu_target> one_target_, batched_target_;
  std::unique_ptr<dflash2_drafter> one_, batched_;
  std::vector<sim_sequence> seqs_;
};

}  // namespace

BOOST_AUTO_TEST_CASE(batched_drafts_equal_one_at_a_time) {
  for (int sequences : {1, 3, 8})
    BOOST_TEST_CONTEXT(sequences << " sequences") {
      batch_fixture f(sequences);
      f.check_step();
      f.accept_some();
      f.check_step();
    }
}

BOOST_AUTO_TEST_CASE(a_sequence_without_context_drafts_nothing_in_a_batch) {
  batch_fixture f(3);
  std::vector<draft_request> reqs = f.requests();
  const std::vector<int32_t> tokens(10, 1);
  reqs.insert(reqs.begin() + 1, draft_request{999, {.tokens = tokens, .prompt_len = 1, .max_draft = 3}});
  reqs.push_back({reqs[0].seq_id, reqs[0].ctx});  // asked twice: refused, not drafted twice
  BOOST_CHECK_THROW(f.batched().propose_batch(reqs), tandem::error);
  reqs.pop_back();
  reqs[2].ctx.max_draft = 0;  // asks for nothing
  const std::vector<std::vector<int32_t>> drafts = f.batched().propose_batch(reqs);
  BOOST_REQUIRE(drafts.size() == 4u);
  BOOST_TEST(drafts[1].empty());
  BOOST_TEST(drafts[2].empty());
  BOOST_TEST(!drafts[0].empty());
  BOOST_TEST(!drafts[3].empty());
}
