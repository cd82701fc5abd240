#include "logit_processing.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <unordered_map>
#include <vector>

#include "tandem_ref/sampling.hpp"

namespace tandem {

int32_t sample_with_penalties(const float* logits, int vocab, const generation_request& r,
                              const sampling_params& p, std::span<const int32_t> generated) {
  std::vector<float> row(logits, logits + vocab);
  std::unordered_map<int32_t, int> counts;
  for (int32_t t : generated) ++counts[t];
  for (auto [tok, n] : counts) {
    if (tok < 0 || tok >= vocab) continue;
    row[tok] -= r.presence_penalty + r.frequency_penalty * static_cast<float>(n);
  }
  return ref::sample_row(row.data(), vocab, p);
}

void fill_logprobs(const float* logits, int vocab, int32_t token, int top, token_event& ev) {
  float mx = -INFINITY;
  for (int i = 0; i < vocab; ++i)
    if (std::isfinite(logits[i])) mx = std::max(mx, logits[i]);
  double sum = 0;
  for (int i = 0; i < vocab; ++i)
    if (std::isfinite(logits[i])) sum += std::exp(static_cast<double>(logits[i]) - mx);
  const float log_z = mx + static_cast<float>(std::log(sum));
  auto lp = [&](int i) { return std::isfinite(logits[i]) ? logits[i] - log_z : -INFINITY; };
  ev.logprob = lp(token);
  top = std::clamp(top, 0, vocab);
  std::vector<int32_t> idx(vocab);
  std::iota(idx.begin(), idx.end(), 0);
  std::partial_sort(idx.begin(), idx.begin() + top, idx.end(), [&](int32_t a, int32_t b) {
    return lp(a) > lp(b) || (lp(a) == lp(b) && a < b);
  });
  ev.top_logprobs.clear();
  for (int i = 0; i < top; ++i) ev.top_logprobs.emplace_back(idx[i], lp(idx[i]));
}

}  // namespace tandem
