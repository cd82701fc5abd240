#include "scratch.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "tandem/error.hpp"

namespace tandem::store {
namespace fs = std::filesystem;
namespace {

std::string errno_text() { return std::strerror(errno); }

void make_dirs(const fs::path& dir) {
  std::error_code ec;
  fs::create_directories(dir, ec);
  if (ec) throw model_error(dir.string(), "cannot create directory: " + ec.message());
}

}  // namespace

model_lock::model_lock(const fs::path& lock_file, const progress_fn& progress) {
  make_dirs(lock_file.parent_path());
  fd_ = ::open(lock_file.c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (fd_ < 0) throw model_error(lock_file.string(), "cannot open lock file: " + errno_text());
  if (::flock(fd_, LOCK_EX | LOCK_NB) == 0) return;
  if (errno == EWOULDBLOCK && progress) {
    progress("waiting for another pull of this model to finish ...");
  }
  while (::flock(fd_, LOCK_EX) != 0) {
    if (errno == EINTR) continue;
    const std::string why = errno_text();
    ::close(fd_);
    throw model_error(lock_file.string(), "cannot lock: " + why);
  }
}

model_lock::~model_lock() {
  if (fd_ >= 0) ::close(fd_);  // closing the descriptor releases the flock
}

scratch_dir::scratch_dir(const fs::path& parent, const std::string& prefix) {
  make_dirs(parent);
  std::string templ = (parent / (prefix + ".XXXXXX")).string();
  std::vector<char> buf(templ.begin(), templ.end());
  buf.push_back('\0');
  if (!::mkdtemp(buf.data())) {
    throw model_error(templ, "cannot create scratch directory: " + errno_text());
  }
  path_ = buf.data();
}

scratch_dir::~scratch_dir() {
  std::error_code ec;
  fs::remove_all(path_, ec);
}

void sync_file(const fs::path& p) {
  const int fd = ::open(p.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw model_error(p.string(), "cannot open: " + errno_text());
  const int rc = ::fsync(fd);
  const std::string why = rc != 0 ? errno_text() : std::string();
  ::close(fd);
  if (rc != 0) throw model_error(p.string(), "fsync failed: " + why);
}

}  // namespace tandem::store
