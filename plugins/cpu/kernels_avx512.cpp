// AVX-512 VNNI kernels: vpdpbusd does the u8 x s8 products and their 4-way sums in one
// instruction. Float kernels are the AVX2 ones (the decode path is bound by memory).
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kernels.hpp"
#include "tandem_quant/ggml_blocks.hpp"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c,avx512f,avx512bw,avx512vl,avx512vnni")
#include <immintrin.h>

#include "simd_common.hpp"

namespace tandem::cpu {
namespace {

struct vnni_dot {
  static __m256i apply(__m256i u8, __m256i s8) {
    return _mm256_dpbusd_epi32(_mm256_setzero_si256(), u8, s8);
  }
};

}  // namespace

const kernel_table& avx512_kernels() {
  using namespace simd;
  static const kernel_table table{"avx512",
                                  quantize_q8,
                                  dot_q4<block_q4_0, vnni_dot>,
                                  dot_q4<block_q4_1, vnni_dot>,
                                  dot_q8_0<vnni_dot>,
                                  dot_float<float>,
                                  dot_float<uint16_t>,
                                  dot,
                                  axpy,
                                  scale};
  return table;
}

}  // namespace tandem::cpu
#pragma GCC pop_options
#endif
