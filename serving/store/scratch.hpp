#pragma once
// The two resources a pull holds: an exclusive lock per model, so concurrent pulls of one
// model take turns instead of clobbering each other, and a scratch directory on the
// cache's file system, so the finished file can be renamed into place atomically.
#include <filesystem>
#include <string>

#include "tandem/model_store.hpp"

namespace tandem::store {

// flock() on cache_dir()/locks/<name>.lock, held until destruction. The lock file itself
// stays: deleting it while another process waits on it would let a third one in.
class model_lock {
 public:
  model_lock(const std::filesystem::path& lock_file, const progress_fn& progress);
  ~model_lock();
  model_lock(const model_lock&) = delete;
  model_lock& operator=(const model_lock&) = delete;

 private:
  int fd_ = -1;
};

// A fresh directory `<parent>/<prefix>.XXXXXX`, removed with its contents on destruction.
class scratch_dir {
 public:
  scratch_dir(const std::filesystem::path& parent, const std::string& prefix);
  ~scratch_dir();
  scratch_dir(const scratch_dir&) = delete;
  scratch_dir& operator=(const scratch_dir&) = delete;
  const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

// fsync()s a file so that its data is on disk before a rename makes it visible.
void sync_file(const std::filesystem::path& p);

}  // namespace tandem::store
