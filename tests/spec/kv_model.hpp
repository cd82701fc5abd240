#pragma once
// kv_model: a tandem::model for engine property tests whose next token is a hash of the
// tokens it reads back from its own paged KV store, so the engine's page bookkeeping is
// what the outputs depend on. forward() writes each computed token (and its position) into
// its page slot, then for each logits row reads positions 0..p through the sequence's page
// table: a slot holding another position (a page given to two sequences, a rejected draft
// left behind, a cached page with other content) is counted in `corrupt_reads` and changes
// the token. The true continuation of a token sequence is kv_model::next(tokens), so a
// drafter can be an oracle that proposes right or wrong tokens at will.
//
// Greedy only (sample() throws for temperature > 0): the tests here are about KV, not
// sampling, which spec_engine checks on the real model.
#include <cstdint>
#include <span>
#include <stdexcept>
#include <vector>

#include "tandem/model.hpp"

namespace tandem::test {

class kv_model final : public model {
 public:
  static constexpr int64_t vocab = 61;

  // The token after `tokens` (FNV-1a over the ids).
  static int32_t next(std::span<const int32_t> tokens) {
    uint64_t h = 1469598103934665603ull;
    for (int32_t t : tokens) h = (h ^ static_cast<uint64_t>(t + 1)) * 1099511628211ull;
    return static_cast<int32_t>((h >> 17) % vocab);
  }

  kv_model() { info_ = {"kv_model", 1, 8, vocab, 1 << 16, "engine test model"}; }

  const model_info& info() const override { return info_; }
  std::vector<backend_op> required_ops() const override { return {}; }
  kv_spec kv_needs() const override { return {{{"test", 1, 1, 1, true, dtype::f32}}}; }
  void allocate_kv(int64_t kv_pages, int page_size) override {
    page_size_ = page_size;
    slots_.assign(static_cast<size_t>(kv_pages * page_size), slot{});
  }

  void forward(const step_plan& plan, const forward_options& opt) override {
    if (opt.all_logits) throw std::runtime_error("kv_model: all_logits is not supported");
    rows_.clear();
    const int64_t n = plan.n_tokens();
    step_rows.push_back(n);
    // A tap row says which token at which position it is: a drafter's observe() can be
    // checked against the sequence it ends up with.
    n_taps_ = opt.hidden_layers.size();
    taps_.assign(static_cast<size_t>(n * info_.hidden), 0.0f);
    int64_t row = 0;
    for (const step_seq& s : plan.seqs)
      for (size_t i = 0; i < s.tokens.size(); ++i, ++row) {
        taps_[static_cast<size_t>(row * info_.hidden)] = static_cast<float>(s.tokens[i]);
        taps_[static_cast<size_t>(row * info_.hidden + 1)] = static_cast<float>(s.start_pos + static_cast<int64_t>(i));
      }
    for (const step_seq& s : plan.seqs) {
      const auto count = static_cast<int64_t>(s.tokens.size());
      if (static_cast<int64_t>(s.pages.size()) * page_size_ < s.start_pos + count)
        throw std::runtime_error("kv_model: the page table does not cover the step's tokens");
      for (int64_t i = 0; i < count; ++i) at(s, s.start_pos + i) = {s.tokens[static_cast<size_t>(i)], s.start_pos + i};
      if (!s.sample) continue;
      for (int64_t i = count - s.logit_rows; i < count; ++i) {
        std::vector<int32_t> seen;
        for (int64_t p = 0; p <= s.start_pos + i; ++p) {
          const slot& sl = at(s, p);
          if (sl.pos != p) ++corrupt_reads;
          seen.push_back(sl.pos == p ? sl.token : -7);
        }
        rows_.push_back(next(seen));
      }
    }
  }

  std::vector<int32_t> sample(const std::vector<sampling_params>& params) override {
    if (params.size() != rows_.size()) throw std::runtime_error("kv_model: sampling params do not match the rows");
    for (const sampling_params& p : params)
      if (!p.greedy()) throw std::runtime_error("kv_model samples greedily only");
    return rows_;
  }
  std::vector<float> logits_to_host() const override {
    std::vector<float> l(rows_.size() * vocab, 0.0f);
    for (size_t r = 0; r < rows_.size(); ++r) l[r * vocab + static_cast<size_t>(rows_[r])] = 1.0f;
    return l;
  }
  int64_t logit_rows() const override { return static_cast<int64_t>(rows_.size()); }
  // Every tap is the same [n_tokens, hidden] rows: (token, position, 0, ...).
  tensor_view hidden_states(int i) const override {
    if (i < 0 || static_cast<size_t>(i) >= n_taps_) throw std::runtime_error("kv_model: no such tap");
    auto* data = const_cast<float*>(taps_.data());
    return tensor_view::contiguous(data, dtype::f32, {static_cast<int64_t>(taps_.size()) / info_.hidden, info_.hidden});
  }

  int64_t corrupt_reads = 0;
  std::vector<int64_t> step_rows;  // tokens computed by each forward

 private:
  struct slot {
    int32_t token = -1;
    int64_t pos = -1;
  };
  slot& at(const step_seq& s, int64_t pos) {
    const int32_t page = s.pages.at(static_cast<size_t>(pos / page_size_));
    return slots_.at(static_cast<size_t>(page) * static_cast<size_t>(page_size_) + static_cast<size_t>(pos % page_size_));
  }

  model_info info_;
  int page_size_ = 16;
  std::vector<slot> slots_;
  std::vector<int32_t> rows_;
  std::vector<float> taps_;
  size_t n_taps_ = 0;
};

}  // namespace tandem::test
