// Reference sampler (see tandem_ref/sampling.hpp). Weights are exp((l - max) / T) in
// double; ranking is (weight desc, id asc). Only the ranked prefix that top-k / top-p
// need is sorted, so a 50k vocabulary costs a partial sort, not a full one.
#include "tandem_ref/sampling.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "tandem/error.hpp"
#include "tandem_ref/philox.hpp"

namespace tandem::ref {
namespace {

bool finite_logit(float l) { return std::isfinite(l) || (l == INFINITY); }

std::vector<double> weights_of(const float* logits, int vocab, float temperature) {
  float mx = -INFINITY;
  for (int i = 0; i < vocab; ++i) {
    if (!std::isnan(logits[i])) mx = std::max(mx, logits[i]);
  }
  if (!(mx > -INFINITY)) throw error("sample: logits row has no finite value");
  std::vector<double> w(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) {
    const float l = logits[i];
    if (std::isnan(l) || l == -INFINITY) {
      w[i] = 0.0;
    } else if (mx == INFINITY) {  // +inf logits share all the mass
      w[i] = l == INFINITY ? 1.0 : 0.0;
    } else {
      w[i] = std::exp((static_cast<double>(l) - mx) / temperature);
    }
  }
  return w;
}

// The first `count` ids of `ids` ranked by (weight desc, id asc), sorted.
void rank_prefix(std::vector<int32_t>& ids, size_t count, const std::vector<double>& w) {
  auto before = [&](int32_t a, int32_t b) { return w[a] > w[b] || (w[a] == w[b] && a < b); };
  std::partial_sort(ids.begin(), ids.begin() + static_cast<std::ptrdiff_t>(count), ids.end(),
                    before);
}

// Length of the shortest ranked prefix of `ids` (its first `avail` entries, sorted up to
// `sorted`) whose mass reaches top_p of `total`; 0 when more sorting is needed.
size_t top_p_cut(const std::vector<int32_t>& ids, size_t sorted, const std::vector<double>& w,
                 double total, float top_p) {
  double cum = 0.0;
  for (size_t i = 0; i < sorted; ++i) {
    cum += w[ids[i]];
    if (cum >= top_p * total) return i + 1;
  }
  return 0;
}

}  // namespace

int32_t argmax_row(const float* logits, int vocab) {
  int32_t best = -1;
  for (int i = 0; i < vocab; ++i) {
    if (std::isnan(logits[i])) continue;
    if (best < 0 || logits[i] > logits[best]) best = i;
  }
  if (best < 0 || !finite_logit(logits[best])) throw error("sample: logits row has no finite value");
  return best;
}

kept_tokens filter_row(const float* logits, int vocab, const sampling_params& p) {
  const std::vector<double> w = weights_of(logits, vocab, p.temperature);
  std::vector<int32_t> ids;
  ids.reserve(static_cast<size_t>(vocab));
  for (int i = 0; i < vocab; ++i) {
    if (w[i] > 0.0) ids.push_back(i);
  }
  size_t keep = ids.size();
  if (p.top_k > 0 && static_cast<size_t>(p.top_k) < keep) {
    keep = static_cast<size_t>(p.top_k);
    rank_prefix(ids, keep, w);
  }
  size_t sorted = keep < ids.size() ? keep : 0;
  if (p.top_p < 1.0f) {
    double total = 0.0;
    if (sorted == 0) {
      sorted = std::min(keep, size_t{64});
      rank_prefix(ids, sorted, w);
    }
    for (size_t i = 0; i < keep; ++i) total += w[ids[i]];
    size_t cut = 0;
    while ((cut = top_p_cut(ids, sorted, w, total, p.top_p)) == 0 && sorted < keep) {
      sorted = std::min(keep, sorted * 8);
      rank_prefix(ids, sorted, w);
    }
    keep = cut == 0 ? keep : cut;
  }
  ids.resize(keep);
  double wmax = 0.0;
  for (int32_t id : ids) wmax = std::max(wmax, w[id]);
  kept_tokens out;
  for (int32_t id : ids) {
    if (p.min_p > 0.0f && w[id] < p.min_p * wmax) continue;
    out.ids.push_back(id);
  }
  std::sort(out.ids.begin(), out.ids.end());
  out.weights.reserve(out.ids.size());
  for (int32_t id : out.ids) out.weights.push_back(w[id]);
  return out;
}

int32_t sample_row(const float* logits, int vocab, const sampling_params& p) {
  if (vocab <= 0) throw error("sample: empty vocabulary");
  if (p.greedy()) return argmax_row(logits, vocab);
  const kept_tokens kept = filter_row(logits, vocab, p);
  const double total = std::accumulate(kept.weights.begin(), kept.weights.end(), 0.0);
  const double target = static_cast<double>(uniform01(p.seed, p.step)) * total;
  double cum = 0.0;
  for (size_t i = 0; i < kept.ids.size(); ++i) {
    cum += kept.weights[i];
    if (cum > target) return kept.ids[i];
  }
  return kept.ids.back();  // rounding left target at the very end of the mass
}

}  // namespace tandem::ref
