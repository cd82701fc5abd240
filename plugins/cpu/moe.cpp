// The sigmoid router of DeepSeek-V3 / GLM-5 (transformers' GlmMoeDsaTopkRouter), one token
// at a time: sigmoid, choice = s + bias, group score = sum of the group's two best choices,
// the topk_group best groups, the top_k best experts in them, weights s (normalized,
// scaled). Experts outside the chosen groups are never picked (the reference masks them
// to -inf).
#include "moe.hpp"

#include <algorithm>
#include <cmath>
#include <numeric>
#include <string>

#include "tandem/error.hpp"

namespace tandem::cpu {
namespace {

[[noreturn]] void fail(const std::string& what) { throw error("backend.cpu moe_route: " + what); }

}  // namespace

cpu_experts::cpu_experts(std::vector<expert> experts, int64_t hidden, int64_t ffn)
    : experts_(std::move(experts)), hidden_(hidden), ffn_(ffn) {}

void check_routing(const moe_routing& r) {
  if (r.n_experts <= 0) fail("routing n_experts " + std::to_string(r.n_experts) + " must be positive");
  if (r.n_group <= 0 || r.n_experts % r.n_group != 0) {
    fail("routing n_group " + std::to_string(r.n_group) + " must be positive and divide n_experts " +
         std::to_string(r.n_experts));
  }
  if (r.topk_group <= 0 || r.topk_group > r.n_group) {
    fail("routing topk_group " + std::to_string(r.topk_group) +
         " must be in [1, n_group = " + std::to_string(r.n_group) + "]");
  }
  const int in_groups = r.topk_group * (r.n_experts / r.n_group);
  if (r.top_k <= 0 || r.top_k > in_groups) {
    fail("routing top_k " + std::to_string(r.top_k) + " must be in [1, " + std::to_string(in_groups) +
         "] (the experts of topk_group groups)");
  }
}

void route_row(const float* logits, const float* bias, const moe_routing& r, int32_t* ids, float* weights) {
  thread_local std::vector<float> s, choice, group_score;
  thread_local std::vector<int32_t> order, cand;
  const int n = r.n_experts, per = n / r.n_group;
  s.resize(n);
  choice.resize(n);
  for (int e = 0; e < n; ++e) {
    s[e] = 1.0f / (1.0f + std::exp(-logits[e]));
    choice[e] = s[e] + (bias != nullptr ? bias[e] : 0.0f);
  }
  // Comparisons on -inf for NaN, so the sorts see a strict weak order.
  auto key = [](float v) { return std::isnan(v) ? -INFINITY : v; };
  group_score.resize(r.n_group);
  for (int g = 0; g < r.n_group; ++g) {
    float best = -INFINITY, second = -INFINITY;
    for (int e = g * per; e < (g + 1) * per; ++e) {
      const float c = key(choice[e]);
      if (c > best) {
        second = best;
        best = c;
      } else if (c > second) {
        second = c;
      }
    }
    group_score[g] = per == 1 ? best : best + second;
  }
  order.resize(r.n_group);
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + r.topk_group, order.end(), [&](int32_t a, int32_t b) {
    return key(group_score[a]) > key(group_score[b]) || (key(group_score[a]) == key(group_score[b]) && a < b);
  });
  cand.clear();
  for (int i = 0; i < r.topk_group; ++i) {
    for (int e = order[i] * per; e < (order[i] + 1) * per; ++e) cand.push_back(e);
  }
  std::partial_sort(cand.begin(), cand.begin() + r.top_k, cand.end(), [&](int32_t a, int32_t b) {
    return key(choice[a]) > key(choice[b]) || (key(choice[a]) == key(choice[b]) && a < b);
  });
  float sum = 0.0f;
  for (int j = 0; j < r.top_k; ++j) {
    ids[j] = cand[j];
    weights[j] = s[cand[j]];
    sum += weights[j];
  }
  for (int j = 0; j < r.top_k; ++j) {
    if (r.norm_topk_prob) weights[j] /= sum + 1e-20f;
    weights[j] *= r.routed_scaling_factor;
  }
}

void run_moe_route(thread_pool& pool, const rows_view& logits, const float* bias, const moe_routing& r,
                   const i32_rows_view& ids, const rows_view& weights) {
  const int64_t block = std::max<int64_t>(1, 16384 / std::max(r.n_experts, 1));
  pool.parallel_for((logits.rows + block - 1) / block, [&](int64_t b) {
    for (int64_t i = b * block; i < std::min(logits.rows, (b + 1) * block); ++i) {
      route_row(logits.row(i), bias, r, ids.row(i), weights.row(i));
    }
  });
}

}  // namespace tandem::cpu
