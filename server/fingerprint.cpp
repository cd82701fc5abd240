#include "fingerprint.hpp"

#include <fmt/format.h>

#ifndef TANDEM_VERSION
#define TANDEM_VERSION "unknown"
#endif

namespace tandem::http {
namespace {

// FNV-1a 64: stable across builds and platforms (std::hash is not).
void mix(uint64_t& h, std::string_view s) {
  for (unsigned char c : s) {
    h ^= c;
    h *= 0x100000001b3ULL;
  }
  h ^= 0xff;  // separates "ab","c" from "a","bc"
  h *= 0x100000001b3ULL;
}

}  // namespace

std::string system_fingerprint(const completion_source& src) {
  uint64_t h = 0xcbf29ce484222325ULL;
  mix(h, TANDEM_VERSION);
  mix(h, src.model_name());
  for (const auto& line : src.summary()) mix(h, line);
  return fmt::format("fp_{:016x}", h);
}

}  // namespace tandem::http
