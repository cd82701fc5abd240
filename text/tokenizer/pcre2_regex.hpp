#pragma once
// A compiled PCRE2 pattern in UTF-8 + UCP mode, JIT-compiled when the library has a JIT.
// Shared read-only between threads; each search makes its own match data.
#include <cstddef>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace tandem::detail {

class pcre2_regex {
 public:
  // Throws tandem::error naming the pattern and PCRE2's message when it does not compile.
  explicit pcre2_regex(const std::string& pattern);
  ~pcre2_regex();
  pcre2_regex(const pcre2_regex&) = delete;
  pcre2_regex& operator=(const pcre2_regex&) = delete;

  // Appends the [begin, end) byte ranges of successive matches in `subject`, which must be
  // valid UTF-8 (it is not checked again). The subject's end is the end for look-arounds.
  void find_all(std::string_view subject, std::vector<std::pair<size_t, size_t>>& out) const;
  bool jit() const { return jit_; }

 private:
  void* code_ = nullptr;  // pcre2_code_8, kept opaque so the header needs no pcre2.h
  bool jit_ = false;
  std::string pattern_;
};

}  // namespace tandem::detail
