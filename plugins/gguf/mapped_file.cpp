#include "mapped_file.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>
#include <string>

#include "tandem/error.hpp"

namespace tandem::gguf {
namespace {

// Tensor data is 32-byte aligned within the file; keep that true in memory for SIMD.
constexpr std::align_val_t buffer_align{64};

[[noreturn]] void sys_fail(const std::filesystem::path& path, const char* what) {
  throw model_error(path.string(), std::string(what) + ": " + std::strerror(errno));
}

struct fd_guard {
  int fd;
  ~fd_guard() { ::close(fd); }
};

void read_all(int fd, const std::filesystem::path& path, std::byte* dst, size_t n) {
  size_t done = 0;
  while (done < n) {
    const ssize_t got = ::read(fd, dst + done, n - done);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) sys_fail(path, "cannot read");
    if (got == 0) throw model_error(path.string(), "file shrank while being read");
    done += static_cast<size_t>(got);
  }
}

}  // namespace

file_bytes::file_bytes(const std::filesystem::path& path, bool use_mmap) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) sys_fail(path, "cannot open");
  fd_guard guard{fd};
  struct stat st {};
  if (::fstat(fd, &st) != 0) sys_fail(path, "cannot stat");
  if (!S_ISREG(st.st_mode)) throw model_error(path.string(), "not a regular file");
  size_ = static_cast<size_t>(st.st_size);
  if (size_ == 0) return;  // nothing to map; the parser reports the empty file
  if (use_mmap) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) sys_fail(path, "cannot map");
    data_ = static_cast<std::byte*>(p);
    mapped_ = true;
    return;
  }
  data_ = static_cast<std::byte*>(::operator new(size_, buffer_align));
  try {
    read_all(fd, path, data_, size_);
  } catch (...) {
    ::operator delete(data_, buffer_align);
    throw;
  }
}

file_bytes::~file_bytes() {
  if (!data_) return;
  if (mapped_) {
    ::munmap(data_, size_);
  } else {
    ::operator delete(data_, buffer_align);
  }
}

}  // namespace tandem::gguf
