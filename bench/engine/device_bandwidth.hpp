#pragma once
// The bandwidth a decode step's weight reads are bounded by, measured on the device the
// model runs on: bench_engine's ceiling.
#include <string>

#include "tandem/device.hpp"

namespace bench {

struct bandwidth {
  std::string what;  // what was measured, for the table
  double gbs = 0;
};

// CPU: best of a few all-core sums of a buffer far larger than the caches (the decode uses
// every core). CUDA: best of a few device-to-device copies of 1 GiB, read + write bytes
// (the GPU.md / RESULTS "device copy" figure). Throws where the device's runtime is not
// built in.
bandwidth measure_bandwidth(const tandem::device& dev);
bandwidth measure_gpu_copy(int device_index);  // device_bandwidth_cuda.cpp or _none.cpp

}  // namespace bench
