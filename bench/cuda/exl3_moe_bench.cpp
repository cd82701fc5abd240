// bench_cuda_exl3_moe: the EXL3 MoE MLP (tandem_exl3_cuda/exl3_moe.hpp) at GLM-5-like
// shapes: E = 256 experts, top-8, hidden 6144, expert width 2048, K = 4 MUL1 (random trellis
// words and scales made on the device: 256 x 3 x 6.3 MB = 4.8 GB of experts), uniformly
// random routing (distinct experts per token, fixed seeds), T = 1, 8, 64 and 4096 tokens.
//  - fat: exl3_moe_forward (route, input, ONE gate+up launch, ONE down launch, combine);
//  - loop: exl3_moe_loop, per active expert a gather, exl3_gemv (<= 16 rows) or
//    exl3_reconstruct + cuBLAS GEMM (more rows) for gate, up and down, silu * mul and a
//    scatter-add, on routing grouped on the host beforehand (the host grouping and its
//    upload are NOT timed: that favours the loop).
// Both run as CUDA graphs of several forwards, each forward with its own routing (so decode
// steps touch different experts and weights come from DRAM, as in serving); the loop at
// 4096 tokens runs eagerly, one forward per timing. Figures are the median of 15 replays
// divided by the forwards per replay. Printed: milliseconds, speedup, tokens/s, and the
// expert trellis bytes the forward touches (3 matrices of each expert that has a token) per
// second against the device-to-device copy bandwidth measured in the same run.
//
//   build/bench/cuda/bench_cuda_exl3_moe
#include <cublas_v2.h>
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "bench_util.hpp"
#include "tandem_exl3_cuda/exl3_moe.hpp"

using namespace tandem;
namespace xc = tandem::exl3::cuda;

namespace {

void ckb(cublasStatus_t e) {
  if (e != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string("cuBLAS: ") + cublasGetStatusString(e));
}

struct routing {
  std::vector<int32_t> ids;
  std::vector<float> w;
  int64_t active = 0;
};

// Top-k distinct experts per token, uniformly random; weights a softmax of N(0, 1) logits.
routing uniform_routing(int64_t T, int64_t topk, int64_t E, uint64_t seed) {
  std::mt19937_64 r(seed);
  std::uniform_int_distribution<int32_t> pick(0, static_cast<int32_t>(E - 1));
  std::normal_distribution<float> logit(0.0f, 1.0f);
  routing out;
  std::vector<char> used(static_cast<size_t>(E), 0);
  for (int64_t t = 0; t < T; ++t) {
    std::vector<int32_t> chosen;
    while (static_cast<int64_t>(chosen.size()) < topk) {
      const int32_t e = pick(r);
      if (std::find(chosen.begin(), chosen.end(), e) == chosen.end()) chosen.push_back(e);
    }
    std::vector<float> l(static_cast<size_t>(topk));
    float sum = 0.0f;
    for (auto& v : l) v = std::exp(logit(r)), sum += v;
    for (int64_t j = 0; j < topk; ++j) {
      out.ids.push_back(chosen[static_cast<size_t>(j)]);
      out.w.push_back(l[static_cast<size_t>(j)] / sum);
      used[static_cast<size_t>(chosen[static_cast<size_t>(j)])] = 1;
    }
  }
  for (char u : used) out.active += u;
  return out;
}

struct row {
  int64_t T = 0;
  double active = 0, fat_ms = 0, loop_ms = 0, gb = 0;
  int ks[2] = {}, units[2] = {}, ctas[2] = {};
  bool loop_graph = true;
};

}  // namespace

int main() {
  cudaStream_t s = nullptr;
  bench::ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const bench::device_info dev = bench::device_banner(s);
  const cudaDeviceProp& prop = dev.prop;
  const double copy = dev.copy;

  const xc::exl3_moe_shape sh{256, 8, 6144, 2048, 4, 2};
  const int64_t E = sh.experts, H = sh.hidden, W = sh.width;
  // Experts: one trellis allocation (E x {gate, up, down}), one for the scales.
  const size_t tr_words = static_cast<size_t>(H / 16 * (W / 16) * 16 * sh.K);  // per matrix, uint16
  const size_t tr_bytes = tr_words * 2;
  auto* trellis = bench::dev_alloc<uint16_t>(tr_bytes * 3 * static_cast<size_t>(E));
  const size_t sc_per_expert = static_cast<size_t>(3 * (H + W));
  auto* scales = bench::dev_alloc<__half>(sc_per_expert * static_cast<size_t>(E) * 2);
  xc::exl3_moe_fill_random_words(trellis, tr_words * 3 * static_cast<size_t>(E), 1, s);
  std::vector<xc::dev_exl3> lin[3];
  {
    __half* sc = scales;
    for (int64_t e = 0; e < E; ++e)
      for (int i = 0; i < 3; ++i) {
        const int64_t k = i < 2 ? H : W, n = i < 2 ? W : H;
        __half* suh = sc;
        __half* svh = sc + k;
        sc += k + n;
        xc::exl3_moe_fill_random_scales(suh, static_cast<size_t>(k), 1000 + 7 * e + i, 1.0f, s);
        xc::exl3_moe_fill_random_scales(svh, static_cast<size_t>(n), 5000 + 7 * e + i,
                                        1.0f / std::sqrt(static_cast<float>(k)), s);
        lin[i].push_back({sh.K, sh.cb, k, n, trellis + (static_cast<size_t>(e) * 3 + i) * tr_words, suh, svh, nullptr});
      }
  }
  bench::ck(cudaGetLastError());
  const std::vector<xc::exl3_moe_expert> tab = xc::exl3_moe_table(sh, lin[0].data(), lin[1].data(), lin[2].data());
  auto* table = bench::dev_alloc<xc::exl3_moe_expert>(tab.size() * sizeof(xc::exl3_moe_expert));
  bench::ck(cudaMemcpy(table, tab.data(), tab.size() * sizeof(xc::exl3_moe_expert), cudaMemcpyHostToDevice));

  cublasHandle_t cublas = nullptr;
  ckb(cublasCreate(&cublas));
  ckb(cublasSetStream(cublas, s));
  auto gemm = [&](const __half* a, const __half* b, float* c, int64_t m, int64_t k, int64_t n, cudaStream_t st) {
    const float alpha = 1.0f, beta = 0.0f;
    ckb(cublasSetStream(cublas, st));
    ckb(cublasGemmEx(cublas, CUBLAS_OP_N, CUBLAS_OP_N, static_cast<int>(n), static_cast<int>(m), static_cast<int>(k),
                     &alpha, b, CUDA_R_16F, static_cast<int>(n), a, CUDA_R_16F, static_cast<int>(k), &beta, c,
                     CUDA_R_32F, static_cast<int>(n), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT));
  };

  const int64_t T_max = 4096;
  const size_t ws_bytes = xc::exl3_moe_workspace_bytes(sh, T_max);
  void* ws = bench::dev_alloc<uint8_t>(ws_bytes);
  std::printf("experts %.2f GB (K=%d trellis), fat-path workspace at %lld tokens %.2f GB\n",
              3.0 * static_cast<double>(tr_bytes) * static_cast<double>(E) / 1e9, sh.K,
              static_cast<long long>(T_max), static_cast<double>(ws_bytes) / 1e9);
  // x: N(0, 1)-ish from a fixed seed (host), shared by all T.
  std::vector<float> xh(static_cast<size_t>(T_max * H));
  {
    std::mt19937 r(77);
    std::normal_distribution<float> nd(0.0f, 1.0f);
    for (auto& v : xh) v = nd(r);
  }
  float* x = bench::dev_alloc<float>(xh.size() * 4);
  float* y = bench::dev_alloc<float>(xh.size() * 4);
  bench::ck(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
  bench::ck(cudaDeviceSynchronize());  // s does not wait for the legacy stream's copies

  std::vector<row> rows;
  for (int64_t T : {1, 8, 64, 4096}) {
    const int fat_calls = T <= 8 ? 20 : T <= 64 ? 10 : 1;
    const int loop_calls = T == 1 ? 20 : T <= 8 ? 5 : T <= 64 ? 2 : 1;
    const int nr = std::max(fat_calls, loop_calls);
    std::vector<routing> rt;
    std::vector<int32_t*> ids;
    std::vector<float*> wts;
    for (int i = 0; i < nr; ++i) {
      rt.push_back(uniform_routing(T, sh.topk, E, 100 * static_cast<uint64_t>(T) + i));
      ids.push_back(bench::dev_alloc<int32_t>(rt.back().ids.size() * 4));
      wts.push_back(bench::dev_alloc<float>(rt.back().w.size() * 4));
      bench::ck(cudaMemcpy(ids.back(), rt.back().ids.data(), rt.back().ids.size() * 4, cudaMemcpyHostToDevice));
      bench::ck(cudaMemcpy(wts.back(), rt.back().w.data(), rt.back().w.size() * 4, cudaMemcpyHostToDevice));
    }
    bench::ck(cudaDeviceSynchronize());
    row rw;
    rw.T = T;
    for (int i = 0; i < fat_calls; ++i) rw.active += static_cast<double>(rt[static_cast<size_t>(i)].active) / fat_calls;
    rw.gb = rw.active * 3.0 * static_cast<double>(tr_bytes) / 1e9;
    auto fat = [&](int i) {
      xc::exl3_moe_forward(sh, table, x, T, ids[static_cast<size_t>(i)], wts[static_cast<size_t>(i)], y, ws, ws_bytes,
                           s);
    };
    fat(0);  // attributes, occupancy; the stats of one forward
    bench::ck(cudaStreamSynchronize(s));
    bench::ck(cudaGetLastError());
    const xc::exl3_moe_stats st = xc::exl3_moe_read_stats(sh, T, ws, s);
    for (int i = 0; i < 2; ++i) rw.ks[i] = st.k_splits[i], rw.units[i] = st.units[i], rw.ctas[i] = st.ctas[i];
    rw.fat_ms = bench::graph_ms(s, fat_calls, fat);

    std::vector<std::unique_ptr<xc::exl3_moe_loop>> loops;
    for (int i = 0; i < loop_calls; ++i)
      loops.push_back(std::make_unique<xc::exl3_moe_loop>(sh, lin[0].data(), lin[1].data(), lin[2].data(),
                                                          rt[static_cast<size_t>(i)].ids.data(),
                                                          rt[static_cast<size_t>(i)].w.data(), T, gemm));
    loops[0]->run(x, y, s);  // warm-up (and the loop's first launches)
    bench::ck(cudaStreamSynchronize(s));
    bench::ck(cudaGetLastError());
    rw.loop_graph = true;  // no cuBLAS inside (every expert <= 16 rows): capture it
    for (const auto& l : loops) rw.loop_graph = rw.loop_graph && l->max_rows() <= xc::exl3_gemv_max_rows;
    if (rw.loop_graph) {
      rw.loop_ms = bench::graph_ms(s, loop_calls, [&](int i) { loops[static_cast<size_t>(i)]->run(x, y, s); });
    } else {
      rw.loop_ms = bench::median_ms(s, 1, 5, [&] { loops[0]->run(x, y, s); });
      bench::ck(cudaGetLastError());
    }
    // Active experts of the loop's routings (may differ from the fat path's set of routings).
    double loop_active = 0;
    for (int i = 0; i < loop_calls; ++i) loop_active += static_cast<double>(loops[static_cast<size_t>(i)]->active_experts());
    loop_active /= loop_calls;
    std::printf("T=%lld: %.1f active experts (loop routings %.1f), chunks %d (max %d rows), gate+up %d units "
                "(k split %d) and down %d units (k split %d) on %d / %d CTAs; fat %.3f ms, loop %.3f ms%s\n",
                static_cast<long long>(T), rw.active, loop_active, st.chunks, st.max_chunk_rows, st.units[0],
                st.k_splits[0], st.units[1], st.k_splits[1], st.ctas[0], st.ctas[1], rw.fat_ms, rw.loop_ms,
                rw.loop_graph ? "" : " (loop eager)");
    rows.push_back(rw);
    loops.clear();
    for (auto p : ids) cudaFree(p);
    for (auto p : wts) cudaFree(p);
  }

  std::printf("\nEXL3 MoE MLP, E=%lld top-%lld, hidden %lld, width %lld, K=%d MUL1 (trellis bytes of the active "
              "experts in GB/s)\n",
              static_cast<long long>(E), static_cast<long long>(sh.topk), static_cast<long long>(H),
              static_cast<long long>(W), sh.K);
  std::printf("%6s %7s %9s %10s %8s %12s %8s %9s %7s %9s\n", "tokens", "experts", "fat ms", "loop ms", "speedup",
              "fat tok/s", "GB", "fat GB/s", "% copy", "loop GB/s");
  for (const row& r : rows) {
    const double fat_gbs = r.gb / (r.fat_ms * 1e-3), loop_gbs = r.gb / (r.loop_ms * 1e-3);
    std::printf("%6lld %7.1f %9.3f %10.3f %7.2fx %12.0f %8.2f %9.0f %6.1f%% %9.0f%s\n", static_cast<long long>(r.T),
                r.active, r.fat_ms, r.loop_ms, r.loop_ms / r.fat_ms, static_cast<double>(r.T) / (r.fat_ms * 1e-3),
                r.gb, fat_gbs, 100.0 * fat_gbs / copy, loop_gbs, r.loop_graph ? "" : "  (loop eager)");
  }
  std::string js = "{\"bench\":\"exl3_moe\",\"device\":\"" + std::string(prop.name) + "\",\"copy_gbs\":" +
                   std::to_string(copy) + ",\"results\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    char b[400];
    std::snprintf(b, sizeof b,
                  "%s{\"tokens\":%lld,\"active_experts\":%.1f,\"fat_ms\":%.4f,\"loop_ms\":%.4f,\"gb_touched\":%.3f,"
                  "\"ks\":[%d,%d],\"units\":[%d,%d],\"ctas\":[%d,%d],\"loop_graph\":%s}",
                  i ? "," : "", static_cast<long long>(r.T), r.active, r.fat_ms, r.loop_ms, r.gb, r.ks[0], r.ks[1],
                  r.units[0], r.units[1], r.ctas[0], r.ctas[1], r.loop_graph ? "true" : "false");
    js += b;
  }
  std::printf("%s]}\n", js.c_str());
  cublasDestroy(cublas);
  cudaFree(x), cudaFree(y), cudaFree(ws), cudaFree(table), cudaFree(trellis), cudaFree(scales);
  cudaStreamDestroy(s);
  return 0;
}
