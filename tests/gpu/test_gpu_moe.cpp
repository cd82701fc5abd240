#define BOOST_TEST_MODULE gpu_moe
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// backend.cuda's MoE ops (cuda_moe.cpp) against backend.cpu's, which test_cpu_moe checks
// against transformers' router and a per-token loop in double.
//
// Routing: ids must match exactly (random logits: no ties) and weights to 1e-6 relative,
// with and without the correction bias and the group mask (GLM-5: 256 experts, top-8).
// Experts: the same bf16 weights on both (backend.cuda keeps them as f16: bf16 values in
// f16's range convert exactly) and backend.cpu with float linears (exact f32 dots). The GEMV
// kernel keeps f32 activations: only the summation order differs (rel 1e-5). The tensor-core
// kernel rounds x and h to f16 (11-bit mantissa, relative rounding 2^-11 ~ 4.9e-4 each, f32
// accumulation): rel 4e-3 over the whole output. The unfused loop baseline rounds as mma.
// Token counts 1, 3, 8 (GEMV), 9 .. 600 (mma: experts of up to ~450 rows, so every CTA shape
// of the wide kernel and a second 256-row tile), with a skewed routing (two experts never
// chosen) and invalid ids (-1, E), which contribute nothing. Two runs of the fused kernels
// are bit-identical (no float atomics).
//
//   build/tests/gpu/test_gpu_moe        (meson test --suite gpu gpu_moe)
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "cuda_backend.hpp"
#include "gpu_util.hpp"
#include "tandem/error.hpp"
#include "tandem_cuda/moe.hpp"
#include "test_util.hpp"

using namespace tandem;
using test::dvec;
using test::rel_err;

namespace {

struct expert_set {
  std::vector<test::test_weight> gate, up, down;
  std::vector<const tensor_info*> g, u, d;
};

expert_set random_experts(std::mt19937& rng, dtype t, int n, int64_t hidden, int64_t ffn) {
  expert_set s;
  for (int e = 0; e < n; ++e) {
    s.gate.push_back(test::random_weight(rng, t, ffn, hidden));
    s.up.push_back(test::random_weight(rng, t, ffn, hidden));
    s.down.push_back(test::random_weight(rng, t, hidden, ffn));
  }
  for (int e = 0; e < n; ++e) {
    s.g.push_back(&s.gate[e].info);
    s.u.push_back(&s.up[e].info);
    s.d.push_back(&s.down[e].info);
  }
  return s;
}

// A routing of n tokens over E experts, top-k distinct, expert 0 in most tokens and the two
// last experts never; weights in (0, 1].
void skewed_routing(std::mt19937& rng, int64_t n, int E, int k, std::vector<int32_t>& ids, std::vector<float>& w) {
  ids.assign(static_cast<size_t>(n * k), 0);
  w.assign(static_cast<size_t>(n * k), 0.0f);
  std::uniform_real_distribution<float> uw(0.05f, 1.0f);
  for (int64_t t = 0; t < n; ++t) {
    std::vector<int32_t> pool;
    for (int e = 0; e < E - 2; ++e) pool.push_back(e);
    std::shuffle(pool.begin(), pool.end(), rng);
    if (t % 4 != 3) std::iter_swap(pool.begin(), std::find(pool.begin(), pool.end(), 0));
    for (int j = 0; j < k; ++j) {
      ids[t * k + j] = pool[j];
      w[t * k + j] = uw(rng);
    }
  }
}

std::vector<float> cpu_experts(const expert_set& s, std::vector<float> x, std::vector<int32_t> ids,
                               std::vector<float> w, int64_t n, int k, int64_t hidden) {
  cpu::cpu_backend cpu({.threads = 2, .memory_mb = 256, .float_linear = true});
  // backend.cpu rejects invalid ids: the pairs the GPU skips get weight 0 on a valid id.
  for (size_t i = 0; i < ids.size(); ++i)
    if (ids[i] < 0 || ids[i] >= static_cast<int32_t>(s.g.size())) ids[i] = 0, w[i] = 0.0f;
  auto ew = cpu.load_experts(s.g, s.u, s.d);
  std::vector<float> out(static_cast<size_t>(n * hidden));
  cpu.moe_experts(*ew, test::view(x, {n, hidden}), test::view(ids, {n, k}), test::view(w, {n, k}),
                  test::view(out, {n, hidden}));
  return out;
}

std::string message_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}

}  // namespace

BOOST_AUTO_TEST_CASE(route_matches_backend_cpu) {
  cuda::cuda_backend gpu;
  cpu::cpu_backend cpu({.threads = 2, .memory_mb = 64});
  std::mt19937 rng(5);
  struct setup {
    moe_routing r;
    bool bias;
  };
  const setup setups[] = {
      {{.n_experts = 256, .top_k = 8, .n_group = 1, .topk_group = 1, .norm_topk_prob = true,
        .routed_scaling_factor = 2.5f},
       true},
      {{.n_experts = 256, .top_k = 8, .n_group = 8, .topk_group = 4, .norm_topk_prob = true,
        .routed_scaling_factor = 2.5f},
       true},
      {{.n_experts = 64, .top_k = 6, .n_group = 1, .topk_group = 1, .norm_topk_prob = false,
        .routed_scaling_factor = 1.0f},
       false},
  };
  for (const setup& s : setups) {
    for (int64_t n : {1, 7, 300}) {
      std::vector<float> logits = test::random_floats(rng, n * s.r.n_experts, 2.0f);
      std::vector<float> bias = s.bias ? test::random_floats(rng, s.r.n_experts, 0.1f) : std::vector<float>{};
      std::vector<int32_t> cids(static_cast<size_t>(n * s.r.top_k));
      std::vector<float> cw(cids.size());
      cpu.moe_route(test::view(logits, {n, s.r.n_experts}),
                    s.bias ? test::view(bias, {s.r.n_experts}) : tensor_view{}, s.r, test::view(cids, {n, s.r.top_k}),
                    test::view(cw, {n, s.r.top_k}));
      dvec<float> dl(gpu, logits), dw(gpu, n * s.r.top_k);
      dvec<int32_t> di(gpu, n * s.r.top_k);
      std::unique_ptr<dvec<float>> db;
      if (s.bias) db = std::make_unique<dvec<float>>(gpu, bias);
      gpu.moe_route(dl.view({n, s.r.n_experts}), db ? db->view({s.r.n_experts}) : tensor_view{}, s.r,
                    di.view({n, s.r.top_k}), dw.view({n, s.r.top_k}));
      BOOST_TEST_CONTEXT("E " << s.r.n_experts << " groups " << s.r.n_group << " n " << n) {
        BOOST_TEST(di.host() == cids);
        BOOST_TEST(rel_err(dw.host(), cw) < 1e-6);
      }
    }
  }
}

BOOST_AUTO_TEST_CASE(experts_match_backend_cpu_at_every_token_count) {
  cuda::cuda_backend gpu;
  std::mt19937 rng(11);
  struct shape {
    int E, k;
    int64_t hidden, ffn;
    std::vector<int64_t> tokens;
  };
  // A small shape, one whose columns are not multiples of the mma kernels' 128 / 256-column
  // tiles, and GLM-5's expert width (moe_intermediate_size 2048 at hidden 2048 keeps the
  // test's memory and CPU time small while crossing every tile boundary). The skewed routing
  // puts expert 0 in 3/4 of the tokens (and by chance in the rest) and spreads the other
  // pairs over E - 3 experts. Expert rows (the wide mma kernel's tiles: <= 128 rows one
  // 128 x 256 CTA per column block, 129..256 one 256 x 128, more cut at 256), about:
  //   E 8 k 2:   n 200: 167 / 47;  n 600: 500 (256 + 244) / 140;
  //   E 16 k 8:  n 300: 268 (256 + 12) / 164;  n 600: 536 (256 + 256 + 24) / 328 (256 + 72);
  //   E 12 k 8:  n 200: 190 / 157.
  // On H100/H200 the wide kernel runs from 32 pairs an expert (P >= 32 E): E 8 n 200, 600;
  // E 16 n 300, 600; E 12 n 200. The smaller mma counts run the 128 x 128 kernel.
  const shape shapes[] = {{8, 2, 64, 96, {1, 3, 8, 9, 40, 200, 600}},
                          {16, 8, 320, 192, {9, 300, 600}},
                          {12, 8, 2048, 2048, {1, 3, 8, 9, 40, 200}}};
  for (const shape& sh : shapes) {
    const expert_set s = random_experts(rng, dtype::bf16, sh.E, sh.hidden, sh.ffn);
    auto ew = gpu.load_experts(s.g, s.u, s.d);
    BOOST_TEST(ew->n_experts() == sh.E);
    for (int64_t n : sh.tokens) {
      std::vector<float> x = test::random_floats(rng, n * sh.hidden);
      std::vector<int32_t> ids;
      std::vector<float> w;
      skewed_routing(rng, n, sh.E, sh.k, ids, w);
      if (n >= 3) ids[1] = -1, ids[static_cast<size_t>(2 * sh.k)] = sh.E;  // skipped pairs
      const std::vector<float> want = cpu_experts(s, x, ids, w, n, sh.k, sh.hidden);
      dvec<float> dx(gpu, x), dwt(gpu, w), dout(gpu, n * sh.hidden);
      dvec<int32_t> dids(gpu, ids);
      auto run = [&](int kernel) {
        dout.poison();
        gpu.force_moe_kernel(kernel);
        gpu.moe_experts(*ew, dx.view({n, sh.hidden}), dids.view({n, sh.k}), dwt.view({n, sh.k}),
                        dout.view({n, sh.hidden}));
        return dout.host();
      };
      BOOST_TEST_CONTEXT("E " << sh.E << " hidden " << sh.hidden << " ffn " << sh.ffn << " n " << n) {
        const std::vector<float> gemv = run(0), mma = run(1), pick = run(-1);
        BOOST_TEST(rel_err(gemv, want) < 1e-5);
        BOOST_TEST(rel_err(mma, want) < 4e-3);
        BOOST_TEST((pick == (n <= cuda::moe_gemv_max_tokens ? gemv : mma)));
        BOOST_TEST((run(1) == mma));  // deterministic: no float atomics
        dout.poison();
        gpu.moe_experts_loop(*ew, dx.view({n, sh.hidden}), dids.view({n, sh.k}), dwt.view({n, sh.k}),
                             dout.view({n, sh.hidden}));
        BOOST_TEST(rel_err(dout.host(), want) < 4e-3);
      }
    }
  }
  gpu.force_moe_kernel(-1);
}

BOOST_AUTO_TEST_CASE(bad_experts_and_arguments_are_clear_errors) {
  cuda::cuda_backend gpu;
  std::mt19937 rng(3);
  expert_set s = random_experts(rng, dtype::f32, 3, 32, 64);
  // A weight beyond f16's range cannot be kept as f16: a load error naming it.
  reinterpret_cast<float*>(s.up[1].bytes.data())[5] = 1.0e6f;
  BOOST_TEST(message_of([&] { gpu.load_experts(s.g, s.u, s.d); }).find("beyond f16's range") != std::string::npos);
  reinterpret_cast<float*>(s.up[1].bytes.data())[5] = 0.5f;
  std::vector<const tensor_info*> two(s.g.begin(), s.g.begin() + 2);
  BOOST_TEST(message_of([&] { gpu.load_experts(two, s.u, s.d); }).find("load_experts") != std::string::npos);
  // gate[0] sets the shapes ({ffn, hidden} from a down tensor here): up[0] is then reported.
  std::vector<const tensor_info*> swapped{s.d[0], s.g[1], s.g[2]};
  BOOST_TEST(message_of([&] { gpu.load_experts(swapped, s.u, s.d); }).find("load_experts: up[0]") !=
             std::string::npos);
  auto ew = gpu.load_experts(s.g, s.u, s.d);
  dvec<float> x(gpu, 2 * 32), w(gpu, 4), out(gpu, 2 * 32);
  dvec<int32_t> ids(gpu, 4);
  BOOST_TEST(message_of([&] {
               gpu.moe_experts(*ew, x.view({2, 32}), ids.view({2, 2}), w.view({2, 2}), x.view({2, 32}));
             }).find("must not overlap") != std::string::npos);
  BOOST_TEST(message_of([&] {
               gpu.moe_experts(*ew, x.view({1, 64}), ids.view({2, 2}), w.view({2, 2}), out.view({2, 32}));
             }).find("x is") != std::string::npos);
  moe_routing bad{.n_experts = 6, .top_k = 2, .n_group = 4, .topk_group = 1};
  BOOST_TEST(message_of([&] {
               gpu.moe_route(x.view({2, 6}), tensor_view{}, bad, ids.view({2, 2}), w.view({2, 2}));
             }).find("n_group") != std::string::npos);
}

TANDEM_GPU_TEST_MAIN
