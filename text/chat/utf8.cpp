#include "utf8.hpp"

#include <cwctype>
#include <locale.h>

namespace tandem::chat_detail {

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += static_cast<char>(cp);
  } else if (cp < 0x800) {
    out += static_cast<char>(0xC0 | (cp >> 6));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else if (cp < 0x10000) {
    out += static_cast<char>(0xE0 | (cp >> 12));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (cp >> 18));
    out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (cp & 0x3F));
  }
}

static size_t sequence_length(unsigned char c) {
  if (c < 0x80) return 1;
  if ((c & 0xE0) == 0xC0) return 2;
  if ((c & 0xF0) == 0xE0) return 3;
  if ((c & 0xF8) == 0xF0) return 4;
  return 1;
}

uint32_t next_codepoint(const std::string& s, size_t& i) {
  unsigned char c = static_cast<unsigned char>(s[i]);
  size_t n = sequence_length(c);
  if (n == 1 || i + n > s.size()) {
    ++i;
    return c;
  }
  uint32_t cp = c & (0xFF >> (n + 1));
  for (size_t k = 1; k < n; ++k) {
    unsigned char b = static_cast<unsigned char>(s[i + k]);
    if ((b & 0xC0) != 0x80) {
      ++i;
      return c;
    }
    cp = (cp << 6) | (b & 0x3F);
  }
  i += n;
  return cp;
}

std::vector<size_t> codepoint_offsets(const std::string& s) {
  std::vector<size_t> offs;
  offs.reserve(s.size() + 1);
  size_t i = 0;
  while (i < s.size()) {
    offs.push_back(i);
    next_codepoint(s, i);
  }
  offs.push_back(s.size());
  return offs;
}

size_t codepoint_count(const std::string& s) {
  size_t n = 0;
  for (size_t i = 0; i < s.size();) {
    next_codepoint(s, i);
    ++n;
  }
  return n;
}

bool is_unicode_space(uint32_t cp) {
  if (cp == ' ' || (cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x1F)) return true;
  return cp == 0x85 || cp == 0xA0 || cp == 0x1680 || (cp >= 0x2000 && cp <= 0x200A) || cp == 0x2028 ||
         cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

namespace {

locale_t utf8_locale() {
  static locale_t loc = newlocale(LC_CTYPE_MASK, "C.UTF-8", static_cast<locale_t>(nullptr));
  return loc;
}

uint32_t map_cp(uint32_t cp, bool upper) {
  if (cp < 0x80) return static_cast<uint32_t>(upper ? std::toupper(static_cast<int>(cp)) : std::tolower(static_cast<int>(cp)));
  locale_t loc = utf8_locale();
  if (!loc) return cp;
  return static_cast<uint32_t>(upper ? towupper_l(static_cast<wint_t>(cp), loc) : towlower_l(static_cast<wint_t>(cp), loc));
}

bool is_cased(uint32_t cp) {
  if (cp < 0x80) return std::isalpha(static_cast<int>(cp)) != 0;
  return map_cp(cp, true) != cp || map_cp(cp, false) != cp;
}

}  // namespace

std::string change_case(const std::string& s, text_case how) {
  std::string out;
  out.reserve(s.size());
  bool prev_cased = false;
  bool first = true;
  for (size_t i = 0; i < s.size();) {
    uint32_t cp = next_codepoint(s, i);
    bool upper = how == text_case::upper || (how == text_case::title && !prev_cased) ||
                 (how == text_case::capitalize && first);
    append_utf8(out, map_cp(cp, upper));
    prev_cased = is_cased(cp);
    first = false;
  }
  return out;
}

}  // namespace tandem::chat_detail
