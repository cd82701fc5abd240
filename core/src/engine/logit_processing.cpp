#include "logit_processing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tandem_ref/sampling.hpp"

namespace tandem {
namespace {

// log-softmax of a row, evaluated lazily: lp(i) = logits[i] - log_z.
struct log_softmax {
  const float* logits;
  float log_z;

  log_softmax(const float* l, int vocab) : logits(l) {
    float mx = -INFINITY;
    for (int i = 0; i < vocab; ++i)
      if (std::isfinite(l[i])) mx = std::max(mx, l[i]);
    double sum = 0;
    for (int i = 0; i < vocab; ++i)
      if (std::isfinite(l[i])) sum += std::exp(static_cast<double>(l[i]) - mx);
    log_z = mx + static_cast<float>(std::log(sum));
  }
  float operator()(int i) const { return std::isfinite(logits[i]) ? logits[i] - log_z : -INFINITY; }
};

std::vector<std::pair<int32_t, float>> top_of(const log_softmax& lp, int vocab, int top) {
  top = std::clamp(top, 0, vocab);
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + top, idx.end(), [&](int32_t a, int32_t b) {
    return lp(a) > lp(b) || (lp(a) == lp(b) && a < b);
  });
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(static_cast<size_t>(top));
  for (int i = 0; i < top; ++i) out.emplace_back(idx[i], lp(idx[i]));
  return out;
}

}  // namespace

void apply_penalties(std::vector<float>& row, const generation_request& r, std::span<const int32_t> generated) {
  const int vocab = static_cast<int>(row.size());
  std::unordered_map<int32_t, int> counts;
  for (int32_t t : generated) ++counts[t];
  for (auto [tok, n] : counts) {
    if (tok < 0 || tok >= vocab) continue;
    row[tok] -= r.presence_penalty + r.frequency_penalty * static_cast<float>(n);
  }
  for (const token_bias& b : r.logit_bias)
    if (b.token >= 0 && b.token < vocab) row[b.token] += b.bias;
}

int32_t sample_with_penalties(const float* logits, int vocab, const generation_request& r,
                              const sampling_params& p, std::span<const int32_t> generated) {
  std::vector<float> row(logits, logits + vocab);
  apply_penalties(row, r, generated);
  return ref::sample_row(row.data(), vocab, p);
}

void fill_logprobs(const float* logits, int vocab, int32_t token, int top, token_event& ev) {
  const log_softmax lp(logits, vocab);
  ev.logprob = lp(token);
  ev.top_logprobs = top_of(lp, vocab, top);
}

void fill_logprobs(const float* logits, int vocab, int32_t token, int top, prompt_token_logprob& out) {
  const log_softmax lp(logits, vocab);
  out.logprob = lp(token);
  out.top = top_of(lp, vocab, top);
}

}  // namespace tandem
