#include "device_memory.hpp"

#include <cuda_runtime_api.h>

#include "check.hpp"

namespace tandem::cuda {

cuda_buffer::cuda_buffer(size_t bytes) : size_(bytes) {
  check(cudaMalloc(&data_, bytes == 0 ? 1 : bytes), "alloc");
}

cuda_buffer::~cuda_buffer() {
  // Freeing synchronizes the device; a sticky error here cannot be reported from a destructor.
  if (data_) cudaFree(data_);
}

bool scratch::grow(size_t bytes) {
  if (buf_ && buf_->size() >= bytes) return false;
  // Half again as much, so a slowly growing step does not reallocate every time.
  const size_t want = buf_ ? std::max(bytes, buf_->size() + buf_->size() / 2) : bytes;
  buf_.reset();
  buf_ = std::make_unique<cuda_buffer>(want);
  return true;
}

void device_memory(size_t* free_bytes, size_t* total_bytes) {
  check(cudaMemGetInfo(free_bytes, total_bytes), "memory_budget");
}

}  // namespace tandem::cuda
