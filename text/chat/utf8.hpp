#pragma once
// UTF-8 helpers: Python strings index, slice and measure by code point, tandem stores
// UTF-8 bytes.
#include <cstdint>
#include <string>
#include <vector>

namespace tandem::chat_detail {

void append_utf8(std::string& out, uint32_t cp);
// Byte offsets of each code point start, plus a final entry equal to s.size().
std::vector<size_t> codepoint_offsets(const std::string& s);
size_t codepoint_count(const std::string& s);
// Python's str.isspace for one code point (ASCII and the common Unicode spaces).
bool is_unicode_space(uint32_t cp);
// Decodes the code point at s[i] and advances i; invalid bytes decode as themselves.
uint32_t next_codepoint(const std::string& s, size_t& i);

// Simple (one-to-one) Unicode case mapping, as C.UTF-8 defines it; Python's special
// cases that change length (German sharp s -> "SS") are not applied.
enum class text_case { upper, lower, title, capitalize };
std::string change_case(const std::string& s, text_case how);

}  // namespace tandem::chat_detail
