#pragma once
// Finds special tokens (CONTROL / USER_DEFINED) in raw text, leftmost-longest, the way
// Hugging Face's added-vocabulary split does before any pre-tokenization.
#include <array>
#include <cstdint>
#include <string_view>
#include <vector>

namespace tandem::detail {

class special_matcher {
 public:
  struct hit {
    size_t pos;
    size_t length;
    int32_t id;
  };

  // Adds a token; empty texts are ignored (they would match everywhere).
  void add(std::string_view text, int32_t id);
  // First hit at or after `from`; length 0 when there is none.
  hit find(std::string_view text, size_t from) const;
  bool empty() const { return count_ == 0; }

 private:
  struct entry {
    std::string_view text;  // views the tokenizer's vocab, which outlives the matcher
    int32_t id;
  };
  std::array<std::vector<entry>, 256> by_first_byte_;  // each longest first
  size_t count_ = 0;
};

}  // namespace tandem::detail
