#pragma once
// Internal: the bytes of a file, either memory-mapped read-only or read into an aligned
// buffer. Errors name the file and the system's reason.
#include <cstddef>
#include <filesystem>
#include <span>

namespace tandem::gguf {

class file_bytes {
 public:
  file_bytes(const std::filesystem::path& path, bool use_mmap);
  file_bytes(const file_bytes&) = delete;
  file_bytes& operator=(const file_bytes&) = delete;
  ~file_bytes();

  std::span<const std::byte> bytes() const { return {data_, size_}; }

 private:
  std::byte* data_ = nullptr;
  size_t size_ = 0;
  bool mapped_ = false;
};

}  // namespace tandem::gguf
