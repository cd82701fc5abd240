#define BOOST_TEST_MODULE gpu_viterbi
#define BOOST_TEST_NO_MAIN
#define BOOST_TEST_ALTERNATIVE_INIT_API
#include <boost/test/included/unit_test.hpp>

// The GPU tile coder (tandem_exl3_cuda/viterbi.hpp) against the CPU coder
// (tandem_exl3/viterbi.hpp): for K = 1..8 and the three codebooks, on Gaussian tiles at a few
// scales and on tiles whose values are the codebook values of a random tail-biting state
// sequence (cost 0), the 256 states of every tile and its path cost must be identical.
// Then prints tiles/s of the GPU coder at K = 2, 4, 8 (mul1, 4096 Gaussian tiles).
//
//   build/tests/gpu/test_gpu_viterbi        (meson test --suite gpu gpu_viterbi)
#include <chrono>
#include <cstdio>
#include <random>
#include <vector>

#include "gpu_util.hpp"
#include "tandem_exl3/codebook.hpp"
#include "tandem_exl3/viterbi.hpp"
#include "tandem_exl3_cuda/viterbi.hpp"

namespace ex = tandem::exl3;

namespace {

void ok(cudaError_t e) { BOOST_REQUIRE_MESSAGE(e == cudaSuccess, cudaGetErrorString(e)); }

struct gpu_run {
  std::vector<uint16_t> states;
  std::vector<float> costs;
  double seconds = 0;
};

gpu_run run_gpu(const std::vector<float>& in, int K, ex::codebook cb) {
  const size_t n = in.size() / 256;
  std::vector<uint16_t> h(in.size());
  for (size_t i = 0; i < in.size(); ++i) h[i] = ex::double_to_half(ex::round_to_half(in[i]));
  void *d_in = nullptr, *d_st = nullptr, *d_cost = nullptr, *ws = nullptr;
  const size_t wsb = ex::cuda::viterbi_workspace_bytes(static_cast<int64_t>(n), K);
  ok(cudaMalloc(&d_in, h.size() * 2));
  ok(cudaMalloc(&d_st, h.size() * 2));
  ok(cudaMalloc(&d_cost, n * 4));
  ok(cudaMalloc(&ws, wsb));
  ok(cudaMemcpy(d_in, h.data(), h.size() * 2, cudaMemcpyHostToDevice));
  ok(cudaMemset(d_st, 0xff, h.size() * 2));
  gpu_run r;
  const auto t0 = std::chrono::steady_clock::now();
  ex::cuda::viterbi_tiles(static_cast<uint16_t*>(d_in), static_cast<int64_t>(n), K, static_cast<int>(cb),
                          static_cast<uint16_t*>(d_st), static_cast<float*>(d_cost), ws, nullptr);
  ok(cudaGetLastError());
  ok(cudaDeviceSynchronize());
  r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  r.states.resize(h.size());
  r.costs.resize(n);
  ok(cudaMemcpy(r.states.data(), d_st, h.size() * 2, cudaMemcpyDeviceToHost));
  ok(cudaMemcpy(r.costs.data(), d_cost, n * 4, cudaMemcpyDeviceToHost));
  cudaFree(d_in), cudaFree(d_st), cudaFree(d_cost), cudaFree(ws);
  return r;
}

}  // namespace

BOOST_AUTO_TEST_CASE(gpu_states_equal_cpu) {
  std::mt19937_64 rng(1234);
  for (int K = 1; K <= 8; ++K)
    for (ex::codebook cb : {ex::codebook::inst3, ex::codebook::mcg, ex::codebook::mul1}) {
      std::vector<float> in;
      std::normal_distribution<float> g(0.0f, 1.0f);
      for (float scale : {1.0f, 1.24f, 0.3f, 3.0f})  // 4 Gaussian tiles
        for (int i = 0; i < 256; ++i) in.push_back(scale * g(rng));
      for (int rep = 0; rep < 2; ++rep) {  // 2 codeword tiles
        std::vector<uint32_t> chunk(256);
        for (auto& c : chunk) c = static_cast<uint32_t>(rng()) & ((1u << K) - 1);
        uint32_t s = 0;
        for (int i = 0; i < 512; ++i) {
          s = ((s << K) | chunk[i % 256]) & 0xffffu;
          if (i >= 256) in.push_back(ex::decode(cb, s));
        }
      }
      const size_t n = in.size() / 256;
      const ex::tile_coder coder(cb, K);
      std::vector<uint16_t> cpu(in.size());
      std::vector<float> q(in.size()), cost(n);
      ex::encode_tiles(coder, in.data(), n, cpu.data(), q.data(), 0, cost.data());
      const gpu_run g2 = run_gpu(in, K, cb);
      for (size_t t = 0; t < n; ++t) {
        size_t diff = 0;
        for (int p = 0; p < 256; ++p) diff += cpu[256 * t + p] != g2.states[256 * t + p];
        BOOST_TEST(diff == 0u, "K=" << K << " cb=" << ex::name(cb) << " tile " << t << ": " << diff
                                     << " states differ");
        BOOST_TEST(g2.costs[t] == cost[t], "K=" << K << " cb=" << ex::name(cb) << " tile " << t);
      }
    }
}

BOOST_AUTO_TEST_CASE(gpu_throughput) {
  std::mt19937_64 rng(99);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> in(4096 * 256);
  for (float& v : in) v = g(rng);
  for (int K : {2, 4, 8}) {
    run_gpu(std::vector<float>(in.begin(), in.begin() + 256 * 64), K, ex::codebook::mul1);  // warm-up
    const gpu_run r = run_gpu(in, K, ex::codebook::mul1);
    std::printf("viterbi_tiles K=%d mul1: %zu tiles in %.3f s = %.0f tiles/s\n", K, in.size() / 256,
                r.seconds, static_cast<double>(in.size() / 256) / r.seconds);
  }
}

TANDEM_GPU_TEST_MAIN
