#include "host_memory.hpp"

#include <sched.h>
#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <sstream>
#include <string>
#include <thread>

#include "tandem/error.hpp"

namespace tandem::cpu {
namespace {
constexpr size_t mmap_threshold = size_t{1} << 20;
constexpr size_t alignment = 64;
}  // namespace

host_buffer::host_buffer(size_t bytes) : size_(bytes) {
  const size_t padded = (bytes + alignment - 1) / alignment * alignment + alignment;
  if (padded >= mmap_threshold) {
    void* p = mmap(nullptr, padded, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
      throw error("backend.cpu: cannot allocate " + std::to_string(bytes) + " bytes");
    }
    data_ = p;
    mapped_ = true;
  } else {
    data_ = std::aligned_alloc(alignment, padded);
    if (data_ == nullptr) throw std::bad_alloc();
    std::memset(data_, 0, padded);
  }
}

host_buffer::~host_buffer() {
  if (mapped_) {
    munmap(data_, (size_ + alignment - 1) / alignment * alignment + alignment);
  } else {
    std::free(data_);
  }
}

size_t available_memory() {
  std::ifstream in("/proc/meminfo");
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    std::string key;
    size_t kib = 0;
    if (fields >> key >> kib && key == "MemAvailable:") return kib * 1024;
  }
  return 0;
}

int usable_cores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) {
    const int n = CPU_COUNT(&set);
    if (n > 0) return n;
  }
  const unsigned hw = std::thread::hardware_concurrency();
  return hw > 0 ? static_cast<int>(hw) : 1;
}

}  // namespace tandem::cpu
