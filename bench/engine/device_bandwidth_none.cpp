// bench_engine built without CUDA: a model on a GPU has no ceiling to measure here.
#include <stdexcept>

#include "device_bandwidth.hpp"

namespace bench {

bandwidth measure_gpu_copy(int) {
  throw std::runtime_error("the model runs on a GPU but bench_engine was built without CUDA (configure with -Dcuda=enabled)");
}

}  // namespace bench
