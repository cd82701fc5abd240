// bench_cpu_ops: backend.cpu quantized linears against the memory-bandwidth ceiling.
//
// Times y = x W^T for the default model's shapes (Q4_1 FFN up/down, the Q8_0 LM head)
// at 1, 8 and 64 activation rows. Weights are rotated over copies totalling >= 256 MiB,
// so every call reads its weights from DRAM as a decode step does (the model is 96 MB,
// larger than L3). Reports GB/s of weight bytes and GFLOP/s (2 * rows * out * in per
// call) next to the measured ceiling: a parallel read of a 512 MiB buffer on the same
// pool, and a single-thread memcpy. Prints a table, then one JSON line.
//
//   build-x/bench/bench_cpu_ops [threads]
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "cpu_backend.hpp"
#include "host_memory.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_quant/ggml_blocks.hpp"

using namespace tandem;
using clock_type = std::chrono::steady_clock;

namespace {

double seconds_since(clock_type::time_point t0) {
  return std::chrono::duration<double>(clock_type::now() - t0).count();
}

// Best of several timed batches of `fn` calls: seconds per call.
template <class F>
double time_call(F fn, double budget_s = 0.4) {
  fn();
  double best = 1e30;
  const auto start = clock_type::now();
  while (seconds_since(start) < budget_s) {
    const auto t0 = clock_type::now();
    for (int i = 0; i < 4; ++i) fn();
    best = std::min(best, seconds_since(t0) / 4);
  }
  return best;
}

struct ceiling {
  double read_gbs, memcpy_gbs;
};

ceiling measure_ceiling(cpu::cpu_backend& be) {
  const size_t n = size_t{128} << 20;  // floats: 512 MiB
  cpu::host_buffer buf(n * sizeof(float));
  auto* f = static_cast<float*>(buf.data());
  for (size_t i = 0; i < n; ++i) f[i] = 1.0f;
  const int64_t parts = 64;
  std::vector<float> sums(parts);
  cpu::thread_pool pool(be.threads());
  const double t_read = time_call([&] {
    pool.parallel_for(parts, [&](int64_t p) {
      const float* s = f + p * (n / parts);
      sums[p] = be.kernels().dot(s, s, static_cast<int64_t>(n / parts));
    });
  }, 1.0);
  const size_t half = n / 2 * sizeof(float);
  const double t_copy = time_call([&] { std::memcpy(f, f + n / 2, half); }, 1.0);
  return {n * sizeof(float) / t_read / 1e9, 2.0 * half / t_copy / 1e9};
}

struct result {
  std::string name;
  int rows;
  double us, gbs, gflops;
};

result bench_linear(cpu::cpu_backend& be, const char* label, dtype type, int64_t out, int64_t in,
                    int rows) {
  const int64_t bytes = *row_bytes(type, in) * out;
  const int copies = static_cast<int>(std::max<int64_t>(1, (int64_t{256} << 20) / bytes));
  std::mt19937 rng(7);
  std::uniform_int_distribution<int> byte(0, 255);
  std::vector<std::vector<uint8_t>> store(copies);
  std::vector<std::unique_ptr<linear_weight>> weights;
  store[0].resize(static_cast<size_t>(bytes));
  for (auto& b : store[0]) b = static_cast<uint8_t>(byte(rng));
  const int64_t rb = *row_bytes(type, in);
  for (int64_t o = 0; o < out; ++o) {  // small finite fp16 scales, not random bit patterns
    for (int64_t b = 0; b < rb; b += traits(type).block_bytes) {
      auto* h = reinterpret_cast<uint16_t*>(store[0].data() + o * rb + b);
      h[0] = fp32_to_fp16(0.01f);
      if (type == dtype::q4_1) h[1] = fp32_to_fp16(-0.05f);
    }
  }
  for (auto& s : store) {
    if (&s != &store[0]) s = store[0];
    tensor_info info{label, type, {out, in}, s.data(), s.size()};
    weights.push_back(be.load_linear(info));
  }
  std::vector<float> x(static_cast<size_t>(rows * in), 0.5f), y(static_cast<size_t>(rows * out));
  const tensor_view xv = tensor_view::contiguous(x.data(), dtype::f32, {rows, in});
  const tensor_view yv = tensor_view::contiguous(y.data(), dtype::f32, {rows, out});
  int next = 0;
  const double t = time_call([&] {
    be.linear(*weights[next], xv, yv);
    next = (next + 1) % copies;
  });
  return {label, rows, t * 1e6, bytes / t / 1e9, 2.0 * rows * out * in / t / 1e9};
}

}  // namespace

int main(int argc, char** argv) {
  const int threads = argc > 1 ? std::atoi(argv[1]) : 0;
  cpu::cpu_backend be({threads, 256, nullptr});
  std::printf("%s\n", be.describe().c_str());
  const ceiling c = measure_ceiling(be);
  std::printf("ceiling: parallel read %.1f GB/s, single-thread memcpy %.1f GB/s (read+write)\n\n",
              c.read_gbs, c.memcpy_gbs);
  std::vector<result> results;
  for (int rows : {1, 8, 64}) {
    results.push_back(bench_linear(be, "q4_1 1536x576 (ffn up)", dtype::q4_1, 1536, 576, rows));
    results.push_back(bench_linear(be, "q4_1 576x1536 (ffn down)", dtype::q4_1, 576, 1536, rows));
    results.push_back(bench_linear(be, "q8_0 49152x576 (lm head)", dtype::q8_0, 49152, 576, rows));
  }
  std::printf("%-26s %5s %10s %9s %7s %9s\n", "linear (out x in)", "rows", "us/call", "GB/s",
              "%ceil", "GFLOP/s");
  for (const auto& r : results) {
    std::printf("%-26s %5d %10.1f %9.2f %6.0f%% %9.2f\n", r.name.c_str(), r.rows, r.us, r.gbs,
                100.0 * r.gbs / c.read_gbs, r.gflops);
  }
  std::string json = "{\"bench\":\"cpu_ops\",\"threads\":" + std::to_string(be.threads()) +
                     ",\"kernels\":\"" + std::string(be.kernels().name) +
                     "\",\"read_gbs\":" + std::to_string(c.read_gbs) +
                     ",\"memcpy_gbs\":" + std::to_string(c.memcpy_gbs) + ",\"results\":[";
  for (size_t i = 0; i < results.size(); ++i) {
    const auto& r = results[i];
    json += (i ? "," : "") + std::string("{\"linear\":\"") + r.name + "\",\"rows\":" +
            std::to_string(r.rows) + ",\"us\":" + std::to_string(r.us) + ",\"gbs\":" +
            std::to_string(r.gbs) + ",\"gflops\":" + std::to_string(r.gflops) + "}";
  }
  std::printf("%s]}\n", json.c_str());
  return 0;
}
