// The GPU ceiling of bench_engine: device-to-device cudaMemcpy of 1 GiB timed with events.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <stdexcept>
#include <string>

#include "device_bandwidth.hpp"

namespace bench {

namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string("device copy bandwidth: ") + what + ": " + cudaGetErrorString(e));
}

}  // namespace

bandwidth measure_gpu_copy(int device_index) {
  constexpr size_t bytes = size_t{1} << 30;
  check(cudaSetDevice(device_index), "cudaSetDevice");
  void *a = nullptr, *b = nullptr;
  check(cudaMalloc(&a, bytes), "cudaMalloc");
  check(cudaMalloc(&b, bytes), "cudaMalloc");
  cudaEvent_t e0, e1;
  check(cudaEventCreate(&e0), "event");
  check(cudaEventCreate(&e1), "event");
  float best_ms = 1e30f;
  for (int r = 0; r < 6; ++r) {  // the first copy warms the clocks; the best of the rest
    check(cudaEventRecord(e0), "record");
    check(cudaMemcpy(b, a, bytes, cudaMemcpyDeviceToDevice), "cudaMemcpy");
    check(cudaEventRecord(e1), "record");
    check(cudaEventSynchronize(e1), "sync");
    float ms = 0;
    check(cudaEventElapsedTime(&ms, e0, e1), "elapsed");
    if (r > 0) best_ms = std::min(best_ms, ms);
  }
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(a);
  cudaFree(b);
  return {"device copy (read + write)", 2.0 * bytes / (best_ms * 1e-3) / 1e9};
}

}  // namespace bench
