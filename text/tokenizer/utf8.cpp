#include "utf8.hpp"

namespace tandem::detail {
namespace {

struct lead_info {
  size_t length;                  // 0: not a lead byte
  unsigned char lo2, hi2;         // allowed range of the second byte
};

// The second byte's range is what excludes overlongs, surrogates and values > U+10FFFF.
lead_info lead(unsigned char b) {
  if (b < 0x80) return {1, 0, 0};
  if (b >= 0xC2 && b <= 0xDF) return {2, 0x80, 0xBF};
  if (b == 0xE0) return {3, 0xA0, 0xBF};
  if (b == 0xED) return {3, 0x80, 0x9F};
  if (b >= 0xE1 && b <= 0xEF) return {3, 0x80, 0xBF};
  if (b == 0xF0) return {4, 0x90, 0xBF};
  if (b >= 0xF1 && b <= 0xF3) return {4, 0x80, 0xBF};
  if (b == 0xF4) return {4, 0x80, 0x8F};
  return {0, 0, 0};
}

}  // namespace

utf8_step read_utf8(std::string_view s) {
  auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const lead_info info = lead(b(0));
  if (info.length == 0) return {utf8_step::invalid, 1};
  for (size_t i = 1; i < info.length; ++i) {
    if (i >= s.size()) return {utf8_step::incomplete, i};
    const unsigned char lo = i == 1 ? info.lo2 : 0x80;
    const unsigned char hi = i == 1 ? info.hi2 : 0xBF;
    if (b(i) < lo || b(i) > hi) return {utf8_step::invalid, i};
  }
  return {utf8_step::complete, info.length};
}

size_t append_utf8_lossy(std::string_view in, std::string& out, bool final) {
  size_t pos = 0;
  while (pos < in.size()) {
    const utf8_step step = read_utf8(in.substr(pos));
    if (step.kind == utf8_step::incomplete && !final) break;
    if (step.kind == utf8_step::complete) {
      out.append(in.substr(pos, step.length));
    } else {
      out.append("\xEF\xBF\xBD");
    }
    pos += step.length;
  }
  return pos;
}

size_t find_invalid_utf8(std::string_view s) {
  size_t pos = 0;
  while (pos < s.size()) {
    const utf8_step step = read_utf8(s.substr(pos));
    if (step.kind != utf8_step::complete) return pos;
    pos += step.length;
  }
  return std::string_view::npos;
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

}  // namespace tandem::detail
