// bench_cuda_moe: backend.cuda's routed experts (moe_experts, f16 experts converted from
// bf16) at GLM-5's MoE shapes: 256 experts, top-8, hidden 6144, expert width 2048 (19 GB of
// f16 experts on the device; every expert's host tensors are the same random bf16 bytes,
// which the timing cannot see: each expert has its own device copy). Uniformly random
// routing, distinct experts per token, one routing per call (fixed seeds).
//  - fused: moe_experts (GEMV kernels up to 8 tokens, the grouped tensor-core GEMM above;
//    nothing read back to the host);
//  - loop: moe_experts_loop, the unfused baseline (routing read back and grouped on the
//    host, per active expert a gather, two cuBLAS GEMMs, silu * up and a scatter-add).
// Printed per token count: median milliseconds of 9 calls, the speedup, tokens/s, and for
// the fused op the expert bytes it must read (3 matrices of each expert with a token) per
// second against the device-to-device copy bandwidth measured in the same run, and its
// matrix rate in TFLOP/s (2 * 3 * hidden * width flops per (token, slot) pair).
//
//   build/bench/cuda/bench_cuda_moe [--experts 256] [--tokens 1,8,64,512,4096]
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "cuda_backend.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;

namespace {

struct routing {
  std::vector<int32_t> ids;
  std::vector<float> w;
  int64_t active = 0;  // experts with at least one token
};

routing uniform_routing(int64_t T, int k, int E, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::uniform_int_distribution<int32_t> pick(0, E - 1);
  std::uniform_real_distribution<float> uw(0.05f, 0.3f);
  routing out;
  std::vector<char> used(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> chosen;
    while (static_cast<int>(chosen.size()) < k) {
      const int32_t e = pick(r);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    for (int32_t e : chosen) {
      out.ids.push_back(e);
      out.w.push_back(uw(r));
      used[e] = 1;
    }
  }
  out.active = std::count(used.begin(), used.end(), 1);
  return out;
}


}  // namespace

int main(int argc, char** argv) try {
  int E = 256;
  const int k = 8;
  const int64_t H = 6144, F = 2048;
  std::vector<int64_t> counts{1, 2, 4, 8, 16, 64, 512, 4096};
  for (int i = 1; i < argc; ++i) {
    const std::string a = argv[i];
    if (a == "--experts" && i + 1 < argc) E = std::atoi(argv[++i]);
    else if (a == "--tokens" && i + 1 < argc) counts = bench::parse_list(argv[++i]);
    else {
      std::fprintf(stderr, "usage: bench_cuda_moe [--experts N] [--tokens a,b,c]\n");
      return 2;
    }
  }
  if (E < k || E > 1024) {
    std::fprintf(stderr, "bench_cuda_moe: --experts must be in [%d, 1024]\n", k);
    return 2;
  }
  cuda::cuda_backend be;
  const bench::device_info dev = bench::device_banner(be.stream());

  // One expert's bf16 tensors, shared by every expert's tensor_info.
  std::mt19937 rng(7);
  std::normal_distribution<float> nd(0.0f, 0.02f);
  auto random_bf16 = [&](int64_t n) {
    std::vector<uint16_t> v(static_cast<size_t>(n));
    for (auto& x : v) x = fp32_to_bf16(nd(rng));
    return v;
  };
  const std::vector<uint16_t> g = random_bf16(F * H), u = random_bf16(F * H), d = random_bf16(H * F);
  auto info = [](const std::vector<uint16_t>& v, int64_t rows, int64_t cols) {
    tensor_info t;
    t.name = "bench.expert";
    t.type = dtype::bf16;
    t.shape = {rows, cols};
    t.data = v.data();
    t.nbytes = v.size() * 2;
    return t;
  };
  const tensor_info gi = info(g, F, H), ui = info(u, F, H), di = info(d, H, F);
  std::vector<const tensor_info*> gs(E, &gi), us(E, &ui), ds(E, &di);
  auto experts = be.load_experts(gs, us, ds);
  std::printf("experts: %d x (gate, up %lld x %lld, down %lld x %lld) f16 = %.1f GB, top-%d\n", E,
              static_cast<long long>(F), static_cast<long long>(H), static_cast<long long>(H),
              static_cast<long long>(F), 3.0 * E * H * F * 2 / 1e9, k);

  const int64_t maxT = *std::max_element(counts.begin(), counts.end());
  auto x = be.alloc(static_cast<size_t>(maxT * H) * 4), out = be.alloc(static_cast<size_t>(maxT * H) * 4);
  auto ids = be.alloc(static_cast<size_t>(maxT * k) * 4), wts = be.alloc(static_cast<size_t>(maxT * k) * 4);
  {
    std::vector<float> hx(static_cast<size_t>(maxT * H));
    std::normal_distribution<float> xd(0.0f, 1.0f);
    for (auto& v : hx) v = xd(rng);
    be.copy_to_device(x->data(), hx.data(), hx.size() * 4);
  }
  std::printf("\n| tokens | experts hit | fused ms | loop ms | speedup | fused tok/s | fused GB/s (%% of copy) | fused TFLOP/s |\n");
  std::printf("| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |\n");
  for (int64_t T : counts) {
    const routing r = uniform_routing(T, k, E, 100 + static_cast<uint64_t>(T));
    be.copy_to_device(ids->data(), r.ids.data(), r.ids.size() * 4);
    be.copy_to_device(wts->data(), r.w.data(), r.w.size() * 4);
    auto v = [&](device_buffer& b, dtype t, int64_t rows, int64_t cols) {
      return tensor_view::contiguous(b.data(), t, {rows, cols}, be.dev());
    };
    const tensor_view xv = v(*x, dtype::f32, T, H), ov = v(*out, dtype::f32, T, H);
    const tensor_view iv = v(*ids, dtype::i32, T, k), wv = v(*wts, dtype::f32, T, k);
    const double fused = bench::median_ms(be.stream(), 2, 9, [&] { be.moe_experts(*experts, xv, iv, wv, ov); });
    const double loop = bench::median_ms(be.stream(), 1, 9, [&] { be.moe_experts_loop(*experts, xv, iv, wv, ov); });
    const double bytes = 3.0 * r.active * H * F * 2;
    const double gbs = bytes / (fused * 1e-3) / 1e9;
    const double tflops = 6.0 * T * k * H * F / (fused * 1e-3) / 1e12;
    std::printf("| %lld | %lld | %.3f | %.3f | %.2fx | %.0f | %.0f (%.0f%%) | %.1f |\n", static_cast<long long>(T),
                static_cast<long long>(r.active), fused, loop, loop / fused, T / (fused * 1e-3), gbs,
                100.0 * gbs / dev.copy, tflops);
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "bench_cuda_moe: %s\n", e.what());
  return 1;
}
