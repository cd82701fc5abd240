#pragma once
// Helpers of the GPU tests: a main() that skips (exit 77) without a usable GPU, device
// copies of host vectors poisoned with NaN before each run, and relative-error checks.
#include <cuda_runtime_api.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <vector>

#include "cuda_backend.hpp"
#include "tandem/backend.hpp"

namespace tandem::test {

// 0 when a device with sm_90/sm_121 code is usable, else the skip reason's exit code 77.
inline bool have_gpu() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) return false;
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) return false;
  return (p.major == 9 && p.minor == 0) || (p.major == 12 && p.minor == 1);
}

// A device buffer holding a copy of a host vector (or `count` NaN-poisoned elements).
template <class T>
struct dvec {
  backend* be;
  std::unique_ptr<device_buffer> buf;
  int64_t count;

  dvec(backend& b, const std::vector<T>& host) : be(&b), count(static_cast<int64_t>(host.size())) {
    buf = b.alloc(host.size() * sizeof(T) + 16);
    b.copy_to_device(buf->data(), host.data(), host.size() * sizeof(T));
  }
  dvec(backend& b, int64_t n) : be(&b), count(n) {
    buf = b.alloc(static_cast<size_t>(n) * sizeof(T) + 16);
    poison();
  }
  void poison() {
    std::vector<uint8_t> nan(static_cast<size_t>(count) * sizeof(T), 0xff);  // NaN floats, -1 ints
    be->copy_to_device(buf->data(), nan.data(), nan.size());
  }
  std::vector<T> host() const {
    std::vector<T> h(static_cast<size_t>(count));
    be->copy_to_host(h.data(), buf->data(), h.size() * sizeof(T));
    be->synchronize();
    return h;
  }
  tensor_view view(std::initializer_list<int64_t> dims) const {
    constexpr dtype t = std::is_same_v<T, float> ? dtype::f32 : dtype::i32;
    return tensor_view::contiguous(buf->data(), t, dims, be->dev());
  }
};

// ||a - b|| / ||b||; infinity when a has a NaN (an unwritten element).
inline double rel_err(const std::vector<float>& a, const std::vector<float>& b) {
  double num = 0.0, den = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return INFINITY;
    if (std::isnan(a[i])) continue;
    num += (double{a[i]} - b[i]) * (double{a[i]} - b[i]);
    den += double{b[i]} * b[i];
  }
  return den == 0.0 ? std::sqrt(num) : std::sqrt(num / den);
}

inline double max_abs_err(const std::vector<float>& a, const std::vector<float>& b) {
  double m = 0.0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double d = std::fabs(double{a[i]} - b[i]);
    if (std::isnan(d)) return INFINITY;
    m = std::max(m, d);
  }
  return m;
}

}  // namespace tandem::test

// Boost.Test header-only main that exits 77 (meson: skipped) without a GPU.
#define TANDEM_GPU_TEST_MAIN                                                      \
  int main(int argc, char* argv[]) {                                             \
    if (!tandem::test::have_gpu()) {                                             \
      std::fprintf(stderr, "no usable CUDA device (sm_90 or sm_121): skipped\n"); \
      return 77;                                                                 \
    }                                                                            \
    return ::boost::unit_test::unit_test_main(&init_unit_test, argc, argv);      \
  }
