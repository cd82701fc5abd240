#pragma once
// Device memory of backend.cuda: plain cudaMalloc buffers (no managed memory), and a
// growable scratch area whose growth tells the backend to drop recorded graphs.
#include <cstddef>
#include <cstdint>

#include "tandem/backend.hpp"

namespace tandem::cuda {

class cuda_buffer final : public device_buffer {
 public:
  explicit cuda_buffer(size_t bytes);  // device_error when the device is out of memory
  ~cuda_buffer() override;
  cuda_buffer(const cuda_buffer&) = delete;
  cuda_buffer& operator=(const cuda_buffer&) = delete;

  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
};

// Scratch memory of one purpose (f16 activations, attention partials, sampler state).
// grow() reallocates when the request is larger and says so: recorded graphs that
// captured the old address must then be dropped.
class scratch {
 public:
  bool grow(size_t bytes);
  void* data() const { return buf_ ? buf_->data() : nullptr; }

 private:
  std::unique_ptr<cuda_buffer> buf_;
};

// Free and total device memory of the current device.
void device_memory(size_t* free_bytes, size_t* total_bytes);

}  // namespace tandem::cuda
