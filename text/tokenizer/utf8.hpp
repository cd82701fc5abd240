#pragma once
// UTF-8 checks shared by encoding (input must be valid) and decoding (output is made valid).
#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace tandem::detail {

// Outcome of reading one sequence at the front of a byte string.
struct utf8_step {
  enum kind_t { complete, incomplete, invalid } kind;
  size_t length;  // bytes of the sequence, or of the maximal invalid subpart (>= 1)
};

// Reads the sequence at the front of non-empty `s`. `incomplete` means every byte so far is
// a valid prefix and `s` ended before the sequence did.
utf8_step read_utf8(std::string_view s);

// Appends `in` to `out` with each maximal invalid subpart replaced by U+FFFD (the rule of
// Unicode's "substitution of maximal subparts", which Rust's from_utf8_lossy follows). When
// `final` is false a trailing incomplete sequence is left unconsumed. Returns bytes consumed.
size_t append_utf8_lossy(std::string_view in, std::string& out, bool final);

// Offset of the first byte that is not part of a valid sequence, or npos if all valid.
size_t find_invalid_utf8(std::string_view s);

// Appends the UTF-8 encoding of code point `cp` (< 0x110000, not a surrogate).
void append_utf8(std::string& out, uint32_t cp);

}  // namespace tandem::detail
