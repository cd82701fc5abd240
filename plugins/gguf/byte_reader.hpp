#pragma once
// A bounds-checked little-endian cursor over the bytes of one GGUF file. Every read
// either succeeds or throws model_error saying what was being read, where, and how
// many bytes were missing; lengths are checked against the bytes left before any
// allocation, so a corrupt length can never ask for more memory than the file holds.
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <span>
#include <string>
#include <string_view>

#include "tandem/error.hpp"

namespace tandem::gguf {

class byte_reader {
 public:
  byte_reader(std::span<const std::byte> bytes, const std::string& label)
      : bytes_(bytes), label_(label) {}

  uint64_t pos() const { return pos_; }
  uint64_t size() const { return bytes_.size(); }
  uint64_t left() const { return bytes_.size() - pos_; }
  const std::string& label() const { return label_; }

  [[noreturn]] void fail(const std::string& message) const { throw model_error(label_, message); }

  template <class T>
  T read(std::string_view what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  // Longest string accepted; a corrupt length in a big file must not copy gigabytes.
  static constexpr uint64_t max_string_bytes = uint64_t{1} << 26;

  // A GGUF string: u64 length, then that many bytes (kept as is, UTF-8 or not).
  std::string read_string(std::string_view what) {
    const auto n = read<uint64_t>(what);
    if (n > left()) {
      fail("truncated: " + std::string(what) + " claims " + std::to_string(n) +
           " bytes at offset " + std::to_string(pos_) + " but only " + std::to_string(left()) +
           " remain");
    }
    if (n > max_string_bytes) {
      fail(std::string(what) + " claims " + std::to_string(n) +
           " bytes, more than the 64 MiB any GGUF string may have");
    }
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_), n);
    pos_ += n;
    return s;
  }

  void skip(uint64_t n, std::string_view what) {
    need(n, what);
    pos_ += n;
  }

 private:
  void need(uint64_t n, std::string_view what) const {
    if (n > left()) {
      fail("truncated: " + std::string(what) + " needs " + std::to_string(n) +
           " bytes at offset " + std::to_string(pos_) + " but the file ends at " +
           std::to_string(size()));
    }
  }

  std::span<const std::byte> bytes_;
  const std::string& label_;
  uint64_t pos_ = 0;
};

}  // namespace tandem::gguf
