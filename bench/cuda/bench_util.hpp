#pragma once
// Timing helpers of the CUDA benches: CUDA events around a callable, median of repeats,
// graphs of repeated calls, device allocations, and the device-to-device copy bandwidth
// measured in the same run (the ceiling).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

namespace tandem::bench {

inline void ck(cudaError_t e) {
  if (e != cudaSuccess) throw std::runtime_error(cudaGetErrorString(e));
}

// "1,8,64" -> {1, 8, 64}: the benches' list arguments.
inline std::vector<int64_t> parse_list(const char* s) {
  std::vector<int64_t> v;
  std::stringstream in(s);
  std::string item;
  while (std::getline(in, item, ',')) v.push_back(std::stoll(item));
  return v;
}

// Median milliseconds of `reps` runs of f on `s`, after `warm` untimed runs.
inline double median_ms(cudaStream_t s, int warm, int reps, const std::function<void()>& f) {
  for (int i = 0; i < warm; ++i) f();
  cudaEvent_t a, b;
  ck(cudaEventCreate(&a));
  ck(cudaEventCreate(&b));
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    ck(cudaEventRecord(a, s));
    f();
    ck(cudaEventRecord(b, s));
    ck(cudaEventSynchronize(b));
    float ms = 0;
    ck(cudaEventElapsedTime(&ms, a, b));
    t.push_back(ms);
  }
  cudaEventDestroy(a);
  cudaEventDestroy(b);
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// GB/s of a 2 GiB device-to-device copy, bytes read + written.
inline double copy_gbs(cudaStream_t s) {
  const size_t bytes = size_t{2} << 30;
  void *x = nullptr, *y = nullptr;
  ck(cudaMalloc(&x, bytes));
  ck(cudaMalloc(&y, bytes));
  ck(cudaMemset(x, 1, bytes));
  const double ms = median_ms(s, 2, 10, [&] { ck(cudaMemcpyAsync(y, x, bytes, cudaMemcpyDeviceToDevice, s)); });
  cudaFree(x);
  cudaFree(y);
  return 2.0 * bytes / (ms * 1e-3) / 1e9;
}

// The GPU's properties and the copy bandwidth (the ceiling) measured on `s`, printed as
// one line.
struct device_info {
  cudaDeviceProp prop{};
  double copy = 0.0;  // GB/s, read + write
};
inline device_info device_banner(cudaStream_t s) {
  device_info d;
  ck(cudaGetDeviceProperties(&d.prop, 0));
  d.copy = copy_gbs(s);
  std::printf("%s, %d SMs, L2 %d MB; device-to-device copy %.0f GB/s (read + write)\n", d.prop.name,
              d.prop.multiProcessorCount, d.prop.l2CacheSize >> 20, d.copy);
  return d;
}

// cudaMalloc of at least `bytes` (16 when 0), as T*; the benches free nothing (one process).
template <class T>
T* dev_alloc(size_t bytes) {
  void* p = nullptr;
  ck(cudaMalloc(&p, std::max<size_t>(bytes, 16)));
  return static_cast<T*>(p);
}

// Median milliseconds per call of body(i), i = 0 .. calls - 1 captured into one CUDA graph
// (so launch gaps are a graph's, as in decode), 3 warm-up and 15 timed replays.
template <class F>
double graph_ms(cudaStream_t s, int calls, F&& body) {
  cudaGraph_t g = nullptr;
  cudaGraphExec_t ge = nullptr;
  ck(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < calls; ++i) body(i);
  ck(cudaStreamEndCapture(s, &g));
  ck(cudaGraphInstantiate(&ge, g, 0));
  const double ms = median_ms(s, 3, 15, [&] { ck(cudaGraphLaunch(ge, s)); });
  ck(cudaGetLastError());
  cudaGraphExecDestroy(ge);
  cudaGraphDestroy(g);
  return ms / calls;
}

}  // namespace tandem::bench
