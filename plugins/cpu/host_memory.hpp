#pragma once
// Host memory for the CPU backend: buffers, and how much RAM the machine can spare.
#include <cstddef>
#include <cstdint>

#include "tandem/backend.hpp"

namespace tandem::cpu {

// Zero-filled host memory, 64-byte aligned. Large buffers come straight from mmap so a
// big KV pool costs no page until it is touched.
class host_buffer final : public device_buffer {
 public:
  explicit host_buffer(size_t bytes);
  ~host_buffer() override;
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;

  void* data() const override { return data_; }
  size_t size() const override { return size_; }

 private:
  void* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

// MemAvailable from /proc/meminfo in bytes; 0 when it cannot be read.
size_t available_memory();

// Hardware threads the process may run on (affinity mask), at least 1.
int usable_cores();

}  // namespace tandem::cpu
