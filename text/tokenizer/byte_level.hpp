#pragma once
// GPT-2's byte alphabet ("bytes_to_unicode"): every byte gets a printable code point so
// that byte-level BPE vocabularies are plain text. Printable Latin-1 bytes map to
// themselves; the other 68 bytes map, in byte order, to U+0100 upwards (space -> 'Ġ').
#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace tandem::detail {

class byte_alphabet {
 public:
  static const byte_alphabet& get();

  // UTF-8 of the symbol that stands for byte `b`.
  const std::string& symbol(uint8_t b) const { return symbols_[b]; }
  // Byte-level text of raw bytes (each byte replaced by its symbol).
  std::string encode(std::string_view raw) const;
  // Raw bytes of byte-level text; nullopt when it holds a character outside the alphabet
  // (or is not valid UTF-8).
  std::optional<std::string> decode(std::string_view text) const;

 private:
  byte_alphabet();
  static constexpr uint32_t max_code_point = 0x144;  // 256 + 68 remapped bytes
  std::array<std::string, 256> symbols_;
  std::array<int16_t, max_code_point> byte_of_{};  // -1: not a symbol
};

}  // namespace tandem::detail
