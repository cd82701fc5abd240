// Run-time choice of the kernel table.
#include "kernels.hpp"

namespace tandem::cpu {
namespace {

bool has_avx2() {
#if defined(__x86_64__)
  return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
         __builtin_cpu_supports("f16c");
#else
  return false;
#endif
}

bool has_avx512_vnni() {
#if defined(__x86_64__)
  return has_avx2() && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
         __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512vnni");
#else
  return false;
#endif
}

}  // namespace

const kernel_table* kernels_by_name(std::string_view name) {
  if (name == "scalar") return &scalar_kernels();
#if defined(__x86_64__)
  if (name == "avx2" && has_avx2()) return &avx2_kernels();
  if (name == "avx512" && has_avx512_vnni()) return &avx512_kernels();
#endif
  return nullptr;
}

const kernel_table& best_kernels() {
#if defined(__x86_64__)
  if (has_avx512_vnni()) return avx512_kernels();
  if (has_avx2()) return avx2_kernels();
#endif
  return scalar_kernels();
}

}  // namespace tandem::cpu
