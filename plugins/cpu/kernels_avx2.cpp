// AVX2 + FMA + F16C kernels. Standard headers come before the target pragma so no
// library code is compiled for AVX2 (it could be merged into generic callers).
#include <cstdint>
#include <string_view>
#include <type_traits>

#include "kernels.hpp"
#include "tandem_quant/ggml_blocks.hpp"

#if defined(__x86_64__)
#pragma GCC push_options
#pragma GCC target("avx2,fma,f16c")
#include <immintrin.h>

#include "simd_common.hpp"

namespace tandem::cpu {
namespace {

// u8 x s8 products summed in pairs to i16, then in pairs to i32. The i16 step saturates
// above 32767; our u8 side is <= 15 (Q4) or |w| <= 128 (Q8_0) and |s8| <= 127, so at
// most 2 * 128 * 127 = 32512.
struct maddubs_dot {
  static __m256i apply(__m256i u8, __m256i s8) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u8, s8), _mm256_set1_epi16(1));
  }
};

}  // namespace

const kernel_table& avx2_kernels() {
  using namespace simd;
  static const kernel_table table{"avx2",
                                  quantize_q8,
                                  dot_q4<block_q4_0, maddubs_dot>,
                                  dot_q4<block_q4_1, maddubs_dot>,
                                  dot_q8_0<maddubs_dot>,
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
