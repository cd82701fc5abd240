#include "byte_level.hpp"

#include "utf8.hpp"

namespace tandem::detail {
namespace {

bool prints_as_itself(uint32_t b) {
  return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF);
}

// Code point of a complete sequence returned by read_utf8.
uint32_t code_point(std::string_view seq) {
  auto b = [&](size_t i) { return static_cast<uint32_t>(static_cast<unsigned char>(seq[i])); };
  switch (seq.size()) {
    case 1: return b(0);
    case 2: return ((b(0) & 0x1F) << 6) | (b(1) & 0x3F);
    case 3: return ((b(0) & 0x0F) << 12) | ((b(1) & 0x3F) << 6) | (b(2) & 0x3F);
    default:
      return ((b(0) & 0x07) << 18) | ((b(1) & 0x3F) << 12) | ((b(2) & 0x3F) << 6) | (b(3) & 0x3F);
  }
}

}  // namespace

byte_alphabet::byte_alphabet() {
  byte_of_.fill(-1);
  uint32_t next_extra = 256;
  for (uint32_t b = 0; b < 256; ++b) {
    const uint32_t cp = prints_as_itself(b) ? b : next_extra++;
    append_utf8(symbols_[b], cp);
    byte_of_[cp] = static_cast<int16_t>(b);
  }
}

const byte_alphabet& byte_alphabet::get() {
  static const byte_alphabet instance;
  return instance;
}

std::string byte_alphabet::encode(std::string_view raw) const {
  std::string out;
  out.reserve(raw.size() * 2);
  for (char c : raw) out += symbols_[static_cast<uint8_t>(c)];
  return out;
}

std::optional<std::string> byte_alphabet::decode(std::string_view text) const {
  std::string out;
  out.reserve(text.size());
  size_t pos = 0;
  while (pos < text.size()) {
    const utf8_step step = read_utf8(text.substr(pos));
    if (step.kind != utf8_step::complete) return std::nullopt;
    const uint32_t cp = code_point(text.substr(pos, step.length));
    if (cp >= max_code_point || byte_of_[cp] < 0) return std::nullopt;
    out.push_back(static_cast<char>(byte_of_[cp]));
    pos += step.length;
  }
  return out;
}

}  // namespace tandem::detail
