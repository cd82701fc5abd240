#include "logit_processing.hpp"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <type_traits>
#include <unordered_map>
#include <utility>
#include <vector>

#include "tandem_ref/sampling.hpp"

namespace tandem {
namespace {

// Four floats as one value (GCC / Clang vector extensions; one SSE register on any x86-64,
// a NEON one on arm64): the row's passes below run on these, since a float reduction in a
// plain loop is not vectorized without -ffast-math.
typedef float v4f __attribute__((vector_size(16)));
typedef int32_t v4i __attribute__((vector_size(16)));

// exp(x) for x <= 0 in float, within a few ulp, without a libm call (for a scalar or a v4f):
// x = k ln2 + r with |r| <= ln2 / 2 (Cody-Waite, two-part ln2), exp(r) by its degree-7
// Taylor polynomial (truncation < 1e-8 relative there), times 2^k built in the exponent
// bits. Below -87 it is exp(-87) ~ 1.6e-38, far below what the row's sum of at least 1 can
// notice. Why not std::exp: a row of the vocabulary is 49,152 calls; with double std::exp
// and a partial sort a logprobs row cost ~0.35 ms on the engine's one thread, now ~0.1 ms
// (bench_logprobs, bench/RESULTS.md).
template <class T>
T exp_nonpositive(T x) {
  x = x < -87.0f ? T{} - 87.0f : x;
  // Round to the nearest integer by adding and removing 1.5 * 2^23 (|x log2 e| < 2^22).
  const T k = (x * 1.44269504f + 12582912.0f) - 12582912.0f;
  const T r = (x - k * 0.693145752f) - k * 1.42860677e-06f;
  T p = r * (1.0f / 5040.0f) + 1.0f / 720.0f;
  p = p * r + 1.0f / 120.0f;
  p = p * r + 1.0f / 24.0f;
  p = p * r + 1.0f / 6.0f;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  if constexpr (std::is_same_v<T, float>) {
    const int32_t bits = (static_cast<int32_t>(k) + 127) << 23;  // 2^k, k in [-126, 0]
    float scale;
    std::memcpy(&scale, &bits, sizeof scale);
    return p * scale;
  } else {
    const v4i bits = (__builtin_convertvector(k, v4i) + 127) << 23;
    return p * reinterpret_cast<const v4f&>(bits);
  }
}

// std::isfinite as comparisons (NaN fails both, +-inf a bound): a bool, or a v4i lane mask.
template <class T>
auto finite(T v) {
  return (v > -INFINITY) & (v < INFINITY);
}

// log-softmax of a row, evaluated lazily: lp(i) = logits[i] - log_z over the finite logits
// (NaN and +-inf count as impossible tokens: -inf).
struct log_softmax {
  const float* logits;
  float log_z;

  log_softmax(const float* l, int vocab) : logits(l) {
    const int whole = vocab / 4 * 4;
    auto load = [l](int i) {
      v4f v;
      std::memcpy(&v, l + i, sizeof v);
      return v;
    };
    v4f mxs = v4f{} - INFINITY;
    for (int i = 0; i < whole; i += 4) {
      const v4f v = load(i);
      mxs = finite(v) & (v > mxs) ? v : mxs;
    }
    float mx = -INFINITY;
    for (int j = 0; j < 4; ++j) mx = std::max(mx, mxs[j]);
    for (int i = whole; i < vocab; ++i) mx = finite(l[i]) ? std::max(mx, l[i]) : mx;
    if (mx == -INFINITY) {  // no finite logit: every token is impossible
      log_z = INFINITY;
      return;
    }
    // Blocks of 1024 summed in float lanes, the blocks' sums in double.
    double sum = 0;
    for (int b = 0; b < whole; b += 1024) {
      v4f part = {};
      for (int i = b; i < std::min(whole, b + 1024); i += 4) {
        const v4f v = load(i);
        part += finite(v) ? exp_nonpositive(v - mx) : v4f{};
      }
      for (int j = 0; j < 4; ++j) sum += part[j];
    }
    for (int i = whole; i < vocab; ++i) sum += finite(l[i]) ? exp_nonpositive(l[i] - mx) : 0.0f;
    log_z = mx + static_cast<float>(std::log(sum));
  }
  float operator()(int i) const { return std::isfinite(logits[i]) ? logits[i] - log_z : -INFINITY; }
};

// The `top` most likely tokens, best first, ties to the lower id: one pass keeping the best
// so far in order (log-softmax is monotonic in the logit, so the logits are compared).
std::vector<std::pair<int32_t, float>> top_of(const log_softmax& lp, int vocab, int top) {
  top = std::clamp(top, 0, vocab);
  std::vector<std::pair<float, int32_t>> best;  // (logit, id), best first
  best.reserve(static_cast<size_t>(top) + 1);
  auto offer = [&](int i) {
    const float v = std::isfinite(lp.logits[i]) ? lp.logits[i] : -INFINITY;
    if (static_cast<int>(best.size()) == top && !(v > best.back().first)) return;
    // After every kept entry of at least v: an equal logit seen earlier has the lower id.
    auto at = std::upper_bound(best.begin(), best.end(), v,
                               [](float x, const std::pair<float, int32_t>& e) { return x > e.first; });
    best.insert(at, {v, i});
    if (static_cast<int>(best.size()) > top) best.pop_back();
  };
  if (top > 0) {
    // Four at a time: a block none of whose finite logits beats the kept worst is skipped.
    const int whole = vocab / 4 * 4;
    for (int i = 0; i < whole; i += 4) {
      v4f v;
      std::memcpy(&v, lp.logits + i, sizeof v);
      const float worst = static_cast<int>(best.size()) == top ? best.back().first : -INFINITY;
      const v4i beats = finite(v) & (v > worst);
      if (static_cast<int>(best.size()) == top && !(beats[0] | beats[1] | beats[2] | beats[3])) continue;
      for (int j = 0; j < 4; ++j) offer(i + j);
    }
    for (int i = whole; i < vocab; ++i) offer(i);
  }
  std::vector<std::pair<int32_t, float>> out;
  out.reserve(best.size());
  for (const auto& [v, i] : best) out.emplace_back(i, lp(i));
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
