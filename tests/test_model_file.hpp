#pragma once
// The default model file the model and GPU tests run on: $TANDEM_TEST_MODEL, which
// tests/meson.build points at the pulled GGUF. A test's main() skips (exit 77) without it:
//   if (!tandem::test::test_model_file()) return 77;
#include <cstdio>
#include <cstdlib>
#include <filesystem>

namespace tandem::test {

// The path, or nullptr after saying on stderr why the test skips.
inline const char* test_model_file() {
  const char* m = std::getenv("TANDEM_TEST_MODEL");
  if (m && std::filesystem::exists(m)) return m;
  std::fprintf(stderr, "model file %s not found: skipped\n", m ? m : "(TANDEM_TEST_MODEL unset)");
  return nullptr;
}

}  // namespace tandem::test
