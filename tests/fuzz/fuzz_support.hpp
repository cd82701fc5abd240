#pragma once
// Shared by the libFuzzer harnesses (tests/fuzz/README.md). A harness catches only the
// exceptions its API documents for bad input; anything else escapes, std::terminate aborts
// and libFuzzer records a crash. `require` states a property that must hold for every
// input: a violation aborts the same way.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>

namespace tandem::fuzz {

inline void require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "fuzz property violated: %s\n", what);
    std::abort();
  }
}

// With TANDEM_FUZZ_VERBOSE set, says what the reader made of an input (to check that seeds
// get past the first error, or to read a finding's message).
inline void note(const std::string& what) {
  static const bool on = std::getenv("TANDEM_FUZZ_VERBOSE") != nullptr;
  if (on) std::fprintf(stderr, "fuzz: %s\n", what.c_str());
}

// Reads every byte (ASan reports a read outside what the reader handed out).
inline void read_all(const void* data, size_t nbytes) {
  const auto* p = static_cast<const unsigned char*>(data);
  volatile unsigned sum = 0;
  for (size_t i = 0; i < nbytes; ++i) sum = sum + p[i];
}

// The repository (for fixtures the harnesses load once): TANDEM_SOURCE_ROOT, else where
// meson configured the build from.
inline std::filesystem::path source_root() {
  if (const char* r = std::getenv("TANDEM_SOURCE_ROOT")) return r;
  return TANDEM_FUZZ_SOURCE_ROOT;
}

// Reads n bytes from the front of `in` (fewer when it is shorter) and drops them.
inline std::string_view take(std::string_view& in, size_t n) {
  const std::string_view out = in.substr(0, n);
  in.remove_prefix(out.size());
  return out;
}

inline uint8_t take_byte(std::string_view& in) {
  if (in.empty()) return 0;
  const auto b = static_cast<uint8_t>(in.front());
  in.remove_prefix(1);
  return b;
}

}  // namespace tandem::fuzz
