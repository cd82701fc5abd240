// bench_cuda_exl3: the EXL3 kernels of tandem_exl3_cuda on square MUL1 matrices (random
// trellis words), against the device-to-device copy bandwidth measured in the same run, for
// both activation paths of the fused GEMV: fp16 (gemv.cu) and int8 ("q8", gemv_q8.cu, what
// backend.cuda's q8_activations selects):
//  - the decode linear at 1 row (input transform + fused decode GEMV + output Hadamard, as
//    backend.cuda runs it) on 8192^2 and 16384^2 weights at K = 2, 3, 4, 6, 8: microseconds,
//    % of the copy bandwidth (trellis bytes, K/8 per weight); the GEMV kernel alone
//    (exl3_gemv_rotated / exl3_gemv_rotated_q8); 8 and 16 rows as a multiple of the 1-row time;
//  - exl3_reconstruct (Ŵ to fp16, the prefill path's decode) in microseconds.
// Each figure is the median of 15 replays of a CUDA graph of 20 launches that rotate over
// enough weight copies to exceed 3x the L2 (so weights come from DRAM, as in decode).
// The last lines summarize each path against the targets.
// Reference on this H200 (shared/GPU.md): exllamav3 1.4.1 takes 34.7 us at K=4, 1 row, 8192^2
// (exllamav3 1.6.5's own kernels: tools/exl3/exllamav3_bench.py, scripts/gpu-exllamav3-bench.sh).
//
//   build/bench/cuda/bench_cuda_exl3
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <string>
#include <utility>
#include <vector>

#include "bench_util.hpp"
#include "tandem_exl3_cuda/exl3_cuda.hpp"

using namespace tandem;
namespace xc = tandem::exl3::cuda;

namespace {

uint64_t splitmix(uint64_t& s) {
  uint64_t z = (s += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

// Median microseconds per call of `body(i)`, i = 0..19 captured into one graph.
template <class F>
double graph_us(cudaStream_t s, F&& body) {
  return bench::graph_ms(s, 20, std::forward<F>(body)) * 1e3;
}

constexpr int paths = 2;  // 0: fp16 activations, 1: int8 (q8)
const char* path_name(int p) { return p == 1 ? "q8" : "fp16"; }

struct row {
  int64_t n;
  int K, path;  // 0 fp16, 1 q8
  double us1, us1_kernel, us8, us16, recon_us, pct;
};

constexpr double exllamav3_k4_8192_us = 34.7;

}  // namespace

int main() {
  cudaStream_t s = nullptr;
  bench::ck(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  const bench::device_info dev = bench::device_banner(s);
  const cudaDeviceProp& prop = dev.prop;
  const double copy = dev.copy;
  std::vector<row> rows;
  uint64_t seed = 1;
  const std::vector<std::pair<int64_t, std::vector<int>>> shapes = {{8192, {2, 3, 4, 6, 8}}, {16384, {2, 3, 4, 6, 8}}};
  for (const auto& [N, Ks] : shapes) {
    const int64_t k = N, n = N;
    // Activations, scratch and outputs for up to 16 rows.
    std::vector<float> xh(static_cast<size_t>(16 * k));
    for (auto& v : xh) v = static_cast<float>(static_cast<int64_t>(splitmix(seed) % 2001) - 1000) / 1000.0f;
    std::vector<uint16_t> sc(static_cast<size_t>(N));
    for (auto& v : sc) v = (splitmix(seed) & 1 ? 0x3C00 : 0xBC00) | static_cast<uint16_t>(splitmix(seed) & 0x1ff);
    float* x = bench::dev_alloc<float>(xh.size() * 4);
    float* y = bench::dev_alloc<float>(static_cast<size_t>(16 * n) * 4);
    __half* suh = bench::dev_alloc<__half>(static_cast<size_t>(N) * 2);
    __half* svh = bench::dev_alloc<__half>(static_cast<size_t>(N) * 2);
    __half* w_hat = bench::dev_alloc<__half>(static_cast<size_t>(k * n) * 2);
    bench::ck(cudaMemcpy(x, xh.data(), xh.size() * 4, cudaMemcpyHostToDevice));
    bench::ck(cudaMemcpy(suh, sc.data(), sc.size() * 2, cudaMemcpyHostToDevice));
    bench::ck(cudaMemcpy(svh, sc.data(), sc.size() * 2, cudaMemcpyHostToDevice));
    for (int K : Ks) {
      const size_t tbytes = static_cast<size_t>(k * n / 8 * K);
      const int copies = static_cast<int>(std::max<size_t>(2, (3 * static_cast<size_t>(prop.l2CacheSize)) / tbytes + 1));
      std::vector<uint64_t> host(tbytes / 8);
      for (auto& v : host) v = splitmix(seed);
      std::vector<uint16_t*> tr(copies);
      for (auto& t : tr) {
        t = bench::dev_alloc<uint16_t>(tbytes);
        bench::ck(cudaMemcpy(t, host.data(), tbytes, cudaMemcpyHostToDevice));
      }
      auto mat = [&](int i) { return xc::dev_exl3{K, 2, k, n, tr[i % copies], suh, svh, nullptr}; };
      void* ws = bench::dev_alloc<uint8_t>(xc::exl3_gemv_scratch_bytes(mat(0), 16));
      bool q8 = false;
      auto lin = [&](int r) {
        return graph_us(s, [&](int i) { xc::exl3_gemv(mat(i), x, r, k, nullptr, n, y, ws, s, q8); });
      };
      auto* xh16 = static_cast<__half*>(ws);
      auto* acc = reinterpret_cast<float*>(static_cast<uint8_t*>(ws) + ((16 * k * 2 + 255) / 256 * 256));
      const double recon_us = graph_us(s, [&](int i) { xc::exl3_reconstruct(mat(i), w_hat, s); });
      for (int v = 0; v < paths; ++v) {
        q8 = v == 1;
        lin(1);  // first launches: attributes, occupancy queries
        row rw{N, K, v, lin(1), 0, lin(8), lin(16), recon_us, 0};
        // Kernel alone, on the activations (fp16 or q8 records) the last lin(16) left in ws.
        rw.us1_kernel = graph_us(s, [&](int i) {
          if (q8) xc::exl3_gemv_rotated_q8(mat(i), xh16, 1, acc, s);
          else xc::exl3_gemv_rotated(mat(i), xh16, 1, acc, s);
        });
        rw.pct = 100.0 * static_cast<double>(tbytes) / (rw.us1 * 1e-6) / 1e9 / copy;
        rows.push_back(rw);
      }
      for (auto t : tr) cudaFree(t);
      cudaFree(ws);
    }
    cudaFree(x), cudaFree(y), cudaFree(suh), cudaFree(svh), cudaFree(w_hat);
  }
  std::string js = "{\"bench\":\"exl3\",\"device\":\"" + std::string(prop.name) + "\",\"copy_gbs\":" +
                   std::to_string(copy) + ",\"results\":[";
  for (size_t i = 0; i < rows.size(); ++i) {
    const row& r = rows[i];
    char b[400];
    std::snprintf(b, sizeof b,
                  "%s{\"n\":%lld,\"K\":%d,\"path\":\"%s\",\"us_1row\":%.2f,\"us_gemv_kernel\":%.2f,\"us_8rows\":%.2f,"
                  "\"us_16rows\":%.2f,\"pct_copy\":%.1f,\"us_reconstruct\":%.2f}",
                  i ? "," : "", static_cast<long long>(r.n), r.K, path_name(r.path), r.us1, r.us1_kernel, r.us8, r.us16,
                  r.pct, r.recon_us);
    js += b;
  }
  std::printf("%s]}\n", js.c_str());

  // Per shape: one line per path (1-row linear us, kernel-only us, % copy, 8/16-row ratios).
  std::printf("\nEXL3 MUL1 decode linear (input transform + GEMV + output Hadamard), copy %.0f GB/s\n", copy);
  std::printf("%-7s %2s %-4s %8s %8s %7s %6s %6s %9s\n", "matrix", "K", "path", "1row us", "gemv us", "% copy", "8r/1r",
              "16r/1r", "recon us");
  for (const row& r : rows)
    std::printf("%5lld^2 %2d %-4s %8.1f %8.1f %6.1f%% %6.2f %6.2f %9.1f\n", static_cast<long long>(r.n), r.K,
                path_name(r.path), r.us1, r.us1_kernel, r.pct, r.us8 / r.us1, r.us16 / r.us1, r.recon_us);

  // Summary, one line per path: 1-row us on 8192^2 per K, 16384^2 % copy per K, the worst
  // 8- and 16-row ratio, K=4 8192^2 against exllamav3 1.4.1's figure.
  auto find = [&](int64_t N, int K, int v) -> const row* {
    for (const row& r : rows)
      if (r.n == N && r.K == K && r.path == v) return &r;
    return nullptr;
  };
  std::printf("\nSUMMARY per path (targets: 16384^2 K=4 >= 50%% copy; 8192^2 K=4 <= %.1f us = 2x exllamav3 1.4.1; "
              "8/16 rows <= 1.5x)\n",
              exllamav3_k4_8192_us / 2);
  std::printf("%-4s | 8192^2 1-row us K=2    3    4    6    8 | 16384^2 %%copy K=2    3    4    6    8 | max 8r 16r | "
              "K4 vs exl3\n",
              "path");
  for (int v = 0; v < paths; ++v) {
    std::printf("%-4s |                  ", path_name(v));
    for (int K : {2, 3, 4, 6, 8}) {
      const row* r = find(8192, K, v);
      std::printf(" %4.1f", r ? r->us1 : 0.0);
    }
    std::printf(" |                ");
    for (int K : {2, 3, 4, 6, 8}) {
      const row* r = find(16384, K, v);
      std::printf(" %4.1f", r ? r->pct : 0.0);
    }
    const row* a = find(8192, 4, v);
    double m8 = 0, m16 = 0;
    for (const row& r : rows)
      if (r.path == v) m8 = std::max(m8, r.us8 / r.us1), m16 = std::max(m16, r.us16 / r.us1);
    std::printf(" | %4.2f %4.2f | %5.2fx\n", m8, m16, a ? exllamav3_k4_8192_us / a->us1 : 0.0);
  }
  cudaStreamDestroy(s);
  return 0;
}
