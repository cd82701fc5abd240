#include "device_bandwidth.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <thread>
#include <vector>

namespace bench {

namespace {

bandwidth host_read() {
  using clock_type = std::chrono::steady_clock;
  std::vector<uint64_t> buf(256 << 20 >> 3, 1);
  const unsigned n = std::max(1u, std::thread::hardware_concurrency());
  double best = 0;
  for (int r = 0; r < 5; ++r) {
    std::vector<uint64_t> sums(n);
    std::vector<std::thread> workers;
    const auto t = clock_type::now();
    for (unsigned i = 0; i < n; ++i)
      workers.emplace_back([&, i] {
        const size_t per = buf.size() / n;
        sums[i] = std::accumulate(buf.begin() + i * per, buf.begin() + (i + 1) * per, uint64_t{0});
      });
    for (auto& w : workers) w.join();
    const double dt = std::chrono::duration<double>(clock_type::now() - t).count();
    if (std::accumulate(sums.begin(), sums.end(), uint64_t{0}) == 42) std::puts("");  // keeps the sums alive
    best = std::max(best, buf.size() * 8.0 / dt / 1e9);
  }
  return {"all-core host read", best};
}

}  // namespace

bandwidth measure_bandwidth(const tandem::device& dev) {
  return dev.kind == tandem::device_kind::cuda ? measure_gpu_copy(dev.index) : host_read();
}

}  // namespace bench
