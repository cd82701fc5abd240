#pragma once
// backend.cpu once per kernel table this machine has (scalar, AVX2, AVX-512; two threads),
// plus one single-threaded backend with the default table: the CPU tests run every op on all.
#include <memory>
#include <vector>

#include "cpu_backend.hpp"

namespace tandem::test {

inline std::vector<std::unique_ptr<cpu::cpu_backend>> backends() {
  std::vector<std::unique_ptr<cpu::cpu_backend>> out;
  for (const char* name : {"scalar", "avx2", "avx512"}) {
    if (const auto* k = cpu::kernels_by_name(name)) {
      out.push_back(std::make_unique<cpu::cpu_backend>(cpu::cpu_options{2, 64, k}));
    }
  }
  out.push_back(std::make_unique<cpu::cpu_backend>(cpu::cpu_options{1, 64, nullptr}));
  return out;
}

}  // namespace tandem::test
