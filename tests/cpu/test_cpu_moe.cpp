#define BOOST_TEST_MODULE cpu_moe
#include <algorithm>
#include <boost/test/unit_test.hpp>
#include <cmath>
#include <functional>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "tandem/error.hpp"
#include "tandem_quant/ggml_blocks.hpp"
#include "test_util.hpp"

// backend.cpu's moe_route and moe_experts.
//
// Routing: hand-made logits whose answer is known (the group mask changes it), then random
// logits against a naive transcription of transformers' GlmMoeDsaTopkRouter.forward (sort
// based, double sums). Experts: a per-token loop over the routed experts in double with the
// dequantized weights; backends with float linears (exact dots) and with f32 weights.
using namespace tandem;
using test::view;

namespace {

float logit(double p) { return static_cast<float>(std::log(p / (1.0 - p))); }

struct routed {
  std::vector<int32_t> ids;
  std::vector<float> weights;
};

routed route(cpu::cpu_backend& be, std::vector<float> logits, std::vector<float> bias, const moe_routing& r) {
  const auto n = static_cast<int64_t>(logits.size()) / r.n_experts;
  routed out{std::vector<int32_t>(static_cast<size_t>(n * r.top_k), -7),
             std::vector<float>(static_cast<size_t>(n * r.top_k), -7.0f)};
  be.moe_route(view(logits, {n, r.n_experts}), bias.empty() ? tensor_view{} : view(bias, {r.n_experts}), r,
               view(out.ids, {n, r.top_k}), view(out.weights, {n, r.top_k}));
  return out;
}

// The reference router on one token, as transformers writes it.
routed naive_route(const float* logits, const float* bias, const moe_routing& r) {
  const int E = r.n_experts, per = E / r.n_group;
  std::vector<double> s(E), choice(E);
  for (int e = 0; e < E; ++e) {
    s[e] = 1.0 / (1.0 + std::exp(-double{logits[e]}));
    choice[e] = s[e] + (bias ? bias[e] : 0.0f);
  }
  std::vector<double> group(r.n_group);
  for (int g = 0; g < r.n_group; ++g) {
    std::vector<double> c(choice.begin() + g * per, choice.begin() + (g + 1) * per);
    std::sort(c.rbegin(), c.rend());
    group[g] = c[0] + (per > 1 ? c[1] : 0.0);
  }
  std::vector<int> gi(r.n_group);
  std::iota(gi.begin(), gi.end(), 0);
  std::stable_sort(gi.begin(), gi.end(), [&](int a, int b) { return group[a] > group[b]; });
  std::vector<double> masked(E, -std::numeric_limits<double>::infinity());
  for (int i = 0; i < r.topk_group; ++i) {
    for (int e = gi[i] * per; e < (gi[i] + 1) * per; ++e) masked[e] = choice[e];
  }
  std::vector<int> ei(E);
  std::iota(ei.begin(), ei.end(), 0);
  std::stable_sort(ei.begin(), ei.end(), [&](int a, int b) { return masked[a] > masked[b]; });
  routed out;
  double sum = 0.0;
  for (int j = 0; j < r.top_k; ++j) sum += s[ei[j]];
  for (int j = 0; j < r.top_k; ++j) {
    out.ids.push_back(ei[j]);
    double w = s[ei[j]];
    if (r.norm_topk_prob) w /= sum + 1e-20;
    out.weights.push_back(static_cast<float>(w * r.routed_scaling_factor));
  }
  return out;
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(route_hand_made_group_masking) {
  cpu::cpu_backend be({2, 64, nullptr});
  moe_routing r{.n_experts = 8,
                .top_k = 2,
                .n_group = 4,
                .topk_group = 2,
                .norm_topk_prob = true,
                .routed_scaling_factor = 2.5f};
  // Groups of two: {0.95, 0.05} sums 1.0, {0.6, 0.6} 1.2, {0.55, 0.55} 1.1, {0.1, 0.2} 0.3.
  // Groups 1 and 2 stay, so expert 0 (the best alone) is masked; 2 and 3 tie: 2 first.
  const std::vector<double> s{0.95, 0.05, 0.6, 0.6, 0.55, 0.55, 0.1, 0.2};
  std::vector<float> logits;
  for (double p : s) logits.push_back(logit(p));
  routed got = route(be, logits, std::vector<float>(8, 0.0f), r);
  BOOST_TEST(got.ids == (std::vector<int32_t>{2, 3}), boost::test_tools::per_element());
  BOOST_TEST(got.weights[0] == 1.25f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(got.weights[1] == 1.25f, boost::test_tools::tolerance(1e-5f));
  // Without groups (n_group 1) expert 0 wins, then 2 (tied with 3).
  moe_routing flat = r;
  flat.n_group = 1;
  flat.topk_group = 1;
  got = route(be, logits, {}, flat);
  BOOST_TEST(got.ids == (std::vector<int32_t>{0, 2}), boost::test_tools::per_element());
  BOOST_TEST(got.weights[0] == float(0.95 / 1.55 * 2.5), boost::test_tools::tolerance(1e-5f));
  // A bias lifts expert 1 (s = 0.05): group 0 scores 0.95 + 1.05, groups 0 and 1 stay, and
  // the order is 1 (choice 1.05), 0 (0.95); the weights are s, not s + bias.
  std::vector<float> bias(8, 0.0f);
  bias[1] = 1.0f;
  got = route(be, logits, bias, r);
  BOOST_TEST(got.ids == (std::vector<int32_t>{1, 0}), boost::test_tools::per_element());
  BOOST_TEST(got.weights[0] == float(0.05 / 1.0 * 2.5), boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(got.weights[1] == float(0.95 / 1.0 * 2.5), boost::test_tools::tolerance(1e-5f));
  // No normalization: the sigmoid times the scale.
  moe_routing raw = r;
  raw.norm_topk_prob = false;
  raw.routed_scaling_factor = 1.0f;
  got = route(be, logits, bias, raw);
  BOOST_TEST(got.weights[0] == 0.05f, boost::test_tools::tolerance(1e-5f));
  BOOST_TEST(got.weights[1] == 0.95f, boost::test_tools::tolerance(1e-5f));
  // Groups of one expert score that expert; top_k spanning all chosen groups.
  moe_routing singles{.n_experts = 4, .top_k = 3, .n_group = 4, .topk_group = 3};
  got = route(be, {logit(0.3), logit(0.9), logit(0.1), logit(0.5)}, {}, singles);
  BOOST_TEST(got.ids == (std::vector<int32_t>{1, 3, 0}), boost::test_tools::per_element());
  // Tied groups: the lower group index stays.
  moe_routing tied{.n_experts = 4, .top_k = 2, .n_group = 2, .topk_group = 1};
  got = route(be, {logit(0.7), logit(0.2), logit(0.2), logit(0.7)}, {}, tied);
  BOOST_TEST(got.ids == (std::vector<int32_t>{0, 1}), boost::test_tools::per_element());
}

BOOST_AUTO_TEST_CASE(route_matches_naive_router_on_random_logits) {
  std::mt19937 rng(61);
  cpu::cpu_backend be({2, 64, nullptr});
  const moe_routing cases[] = {
      {.n_experts = 256,
       .top_k = 8,
       .n_group = 8,
       .topk_group = 4,
       .norm_topk_prob = true,
       .routed_scaling_factor = 2.5f},
      {.n_experts = 64,
       .top_k = 6,
       .n_group = 1,
       .topk_group = 1,
       .norm_topk_prob = true,
       .routed_scaling_factor = 1.0f},
      {.n_experts = 48,
       .top_k = 5,
       .n_group = 16,
       .topk_group = 2,
       .norm_topk_prob = false,
       .routed_scaling_factor = 1.5f},
      {.n_experts = 12,
       .top_k = 12,
       .n_group = 3,
       .topk_group = 3,
       .norm_topk_prob = true,
       .routed_scaling_factor = 1.0f},
  };
  for (const moe_routing& r : cases) {
    for (int64_t n : {1, 7, 300}) {
      auto logits = test::random_floats(rng, n * r.n_experts, 2.0f);
      auto bias = test::random_floats(rng, r.n_experts, 0.3f);
      const routed got = route(be, logits, bias, r);
      for (int64_t i = 0; i < n; ++i) {
        const routed want = naive_route(logits.data() + i * r.n_experts, bias.data(), r);
        for (int j = 0; j < r.top_k; ++j) {
          const int64_t at = i * r.top_k + j;
          if (got.ids[at] != want.ids[j] ||
              std::fabs(got.weights[at] - want.weights[j]) > 1e-5f * (1 + want.weights[j])) {
            BOOST_ERROR("E " << r.n_experts << " groups " << r.n_group << " row " << i << " slot " << j
                             << ": expert " << got.ids[at] << " weight " << got.weights[at] << ", naive "
                             << want.ids[j] << " " << want.weights[j]);
            break;
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(route_rejects_bad_settings) {
  cpu::cpu_backend be({1, 64, nullptr});
  std::vector<float> logits(2 * 8), bias(8), w(2 * 2);
  std::vector<int32_t> ids(2 * 2);
  auto call = [&](moe_routing r, int64_t bias_n = 8) {
    return error_of([&] {
      be.moe_route(view(logits, {2, 8}), view(bias, {bias_n}), r, view(ids, {2, 2}), view(w, {2, 2}));
    });
  };
  const moe_routing ok{.n_experts = 8, .top_k = 2, .n_group = 4, .topk_group = 2};
  BOOST_TEST(call(ok) == "");
  moe_routing r = ok;
  r.n_group = 3;
  BOOST_TEST(call(r).find("moe_route: routing n_group 3") != std::string::npos);
  r = ok;
  r.topk_group = 5;
  BOOST_TEST(call(r).find("moe_route: routing topk_group") != std::string::npos);
  r = ok;
  r.topk_group = 1;
  r.top_k = 3;  // one group holds only 2 experts
  BOOST_TEST(call(r).find("moe_route: routing top_k 3") != std::string::npos);
  r = ok;
  r.n_experts = 16;
  r.top_k = 2;
  BOOST_TEST(call(r).find("moe_route: logits") != std::string::npos);
  BOOST_TEST(call(ok, 7).find("moe_route: bias") != std::string::npos);
  r = ok;
  r.top_k = 1;
  BOOST_TEST(call(r).find("moe_route: ids") != std::string::npos);
}

namespace {

struct expert_set {
  std::vector<test::test_weight> gate, up, down;
  std::unique_ptr<expert_weights> w;
};

expert_set make_experts(cpu::cpu_backend& be, std::mt19937& rng, dtype t, int n, int64_t hidden,
                        int64_t ffn) {
  expert_set s;
  for (int e = 0; e < n; ++e) {
    s.gate.push_back(test::random_weight(rng, t, ffn, hidden));
    s.up.push_back(test::random_weight(rng, t, ffn, hidden));
    s.down.push_back(test::random_weight(rng, t, hidden, ffn));
  }
  std::vector<const tensor_info*> g, u, d;
  for (int e = 0; e < n; ++e) {
    g.push_back(&s.gate[e].info);
    u.push_back(&s.up[e].info);
    d.push_back(&s.down[e].info);
  }
  s.w = be.load_experts(g, u, d);
  return s;
}

std::vector<double> apply_weight(const test::test_weight& w, const std::vector<double>& x) {
  const int64_t out = w.info.shape[0], in = w.info.shape[1], rb = *row_bytes(w.info.type, in);
  std::vector<float> row(static_cast<size_t>(in));
  std::vector<double> y(static_cast<size_t>(out));
  for (int64_t o = 0; o < out; ++o) {
    dequantize_row(w.info.type, w.bytes.data() + o * rb, row.data(), in);
    for (int64_t j = 0; j < in; ++j) y[o] += row[j] * x[j];
  }
  return y;
}

}  // namespace

BOOST_AUTO_TEST_CASE(experts_match_a_per_token_loop) {
  std::mt19937 rng(62);
  const int64_t hidden = 64, ffn = 96;
  const int E = 6, k = 3;
  struct setup {
    cpu::cpu_options opt;
    dtype t;
  };
  const setup setups[] = {{{.threads = 2, .memory_mb = 64}, dtype::f32},
                          {{.threads = 2, .memory_mb = 64}, dtype::bf16},
                          {{.threads = 1, .memory_mb = 64}, dtype::f16},
                          {{.threads = 2, .memory_mb = 64, .float_linear = true}, dtype::q8_0},
                          {{.threads = 2, .memory_mb = 64, .float_linear = true}, dtype::q4_1}};
  for (const setup& st : setups) {
    cpu::cpu_backend be(st.opt);
    expert_set ex = make_experts(be, rng, st.t, E, hidden, ffn);
    BOOST_TEST(ex.w->n_experts() == E);
    BOOST_TEST(ex.w->hidden() == hidden);
    BOOST_TEST(ex.w->ffn() == ffn);
    for (int64_t n : {1, 5, 17}) {
      auto x = test::random_floats(rng, n * hidden);
      auto wts = test::random_floats(rng, n * k);
      std::vector<int32_t> ids(static_cast<size_t>(n * k));
      std::uniform_int_distribution<int> pick(0, E - 2);  // expert E - 1 is never routed to
      for (auto& id : ids) id = pick(rng);
      if (n > 1) ids[k] = ids[k + 1];  // a token listing an expert twice counts it twice
      std::vector<float> out(static_cast<size_t>(n * hidden), 99.0f);
      const auto x0 = x;
      be.moe_experts(*ex.w, view(x, {n, hidden}), view(ids, {n, k}), view(wts, {n, k}),
                     view(out, {n, hidden}));
      BOOST_TEST((x == x0));
      for (int64_t i = 0; i < n; ++i) {
        std::vector<double> want(static_cast<size_t>(hidden), 0.0);
        const std::vector<double> xi(x.begin() + i * hidden, x.begin() + (i + 1) * hidden);
        for (int j = 0; j < k; ++j) {
          const int e = ids[i * k + j];
          std::vector<double> g = apply_weight(ex.gate[e], xi);
          const std::vector<double> u = apply_weight(ex.up[e], xi);
          for (int64_t f = 0; f < ffn; ++f) g[f] = g[f] / (1.0 + std::exp(-g[f])) * u[f];
          const std::vector<double> d = apply_weight(ex.down[e], g);
          for (int64_t h = 0; h < hidden; ++h) want[h] += wts[i * k + j] * d[h];
        }
        for (int64_t h = 0; h < hidden; ++h) {
          const double got = out[i * hidden + h];
          if (std::fabs(got - want[h]) > 1e-4 * (1.0 + std::fabs(want[h]))) {
            BOOST_ERROR(be.describe() << " " << name(st.t) << " n " << n << " row " << i << " col " << h
                                      << ": " << got << ", per-token loop " << want[h]);
            break;
          }
        }
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(experts_with_q8_linears_stay_close) {
  // The default q8 activations: the same loop, a tolerance for the activation rounding.
  std::mt19937 rng(63);
  cpu::cpu_backend be({2, 64, nullptr});
  expert_set ex = make_experts(be, rng, dtype::q8_0, 4, 64, 64);
  const int64_t n = 9, k = 2;
  auto x = test::random_floats(rng, n * 64);
  std::vector<int32_t> ids(n * k);
  for (int64_t i = 0; i < n * k; ++i) ids[i] = static_cast<int32_t>((i * 3) % 4);
  std::vector<float> wts(n * k, 0.5f), out(n * 64), again(n * 64);
  be.moe_experts(*ex.w, view(x, {n, 64}), view(ids, {n, k}), view(wts, {n, k}), view(out, {n, 64}));
  // Per token, one expert at a time, through linear(): the same kernels, so the same floats
  // up to the order of the two additions into out.
  for (int64_t i = 0; i < n; ++i) {
    std::vector<float> acc(64, 0.0f);
    for (int64_t j = 0; j < k; ++j) {
      const int e = ids[i * k + j];
      auto lg = be.load_linear(ex.gate[e].info), lu = be.load_linear(ex.up[e].info),
           ld = be.load_linear(ex.down[e].info);
      std::vector<float> xi(x.begin() + i * 64, x.begin() + (i + 1) * 64), g(64), u(64), d(64);
      be.linear(*lg, view(xi, {1, 64}), view(g, {1, 64}));
      be.linear(*lu, view(xi, {1, 64}), view(u, {1, 64}));
      be.silu_mul(view(g, {1, 64}), view(u, {1, 64}), view(g, {1, 64}));
      be.linear(*ld, view(g, {1, 64}), view(d, {1, 64}));
      for (int h = 0; h < 64; ++h) acc[h] += 0.5f * d[h];
    }
    for (int h = 0; h < 64; ++h) {
      BOOST_TEST(out[i * 64 + h] == acc[h], boost::test_tools::tolerance(1e-5f));
    }
  }
}

BOOST_AUTO_TEST_CASE(experts_reject_bad_arguments) {
  std::mt19937 rng(64);
  cpu::cpu_backend be({1, 64, nullptr});
  expert_set ex = make_experts(be, rng, dtype::f32, 3, 32, 64);
  std::vector<float> x(2 * 32), out(2 * 32), w(2 * 2);
  std::vector<int32_t> ids{0, 1, 2, 3};
  auto call = [&](tensor_view xv, tensor_view ov) {
    return error_of([&] { be.moe_experts(*ex.w, xv, view(ids, {2, 2}), view(w, {2, 2}), ov); });
  };
  BOOST_TEST(call(view(x, {2, 32}), view(out, {2, 32})).find("moe_experts: ids[1, 1] = 3") !=
             std::string::npos);
  ids[3] = 0;
  BOOST_TEST(call(view(x, {2, 32}), view(out, {2, 32})) == "");
  BOOST_TEST(call(view(x, {2, 32}), view(x, {2, 32})).find("moe_experts: out must not overlap") !=
             std::string::npos);
  BOOST_TEST(call(view(x, {1, 64}), view(out, {2, 32})).find("moe_experts: x") != std::string::npos);
  // load_experts: counts and shapes.
  std::vector<const tensor_info*> g{&ex.gate[0].info, &ex.gate[1].info}, u{&ex.up[0].info},
      d{&ex.down[0].info};
  BOOST_TEST(error_of([&] { be.load_experts(g, u, d); }).find("load_experts:") != std::string::npos);
  std::vector<const tensor_info*> g1{&ex.gate[0].info},
      bad_d{&ex.gate[1].info};  // {ffn, hidden}, not {hidden, ffn}
  BOOST_TEST(error_of([&] { be.load_experts(g1, u, bad_d); }).find("load_experts: down[0]") !=
             std::string::npos);
}
