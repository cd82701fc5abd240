#pragma once
// GGML block formats (the layout GGUF files store) and the reference conversions.
//
// A block packs 32 consecutive elements of a row with a per-block scale (and minimum).
// Element j of a Q4 block is the LOW nibble of qs[j] for j < 16 and the HIGH nibble of
// qs[j - 16] for j >= 16 — not interleaved pairs.
//
//   Q4_0: x = d * (q - 8)      q in [0, 15]
//   Q4_1: x = d * q + m        q in [0, 15]
//   Q8_0: x = d * q            q in [-128, 127] (the quantizer uses [-127, 127])
//
//   std::vector<float> row(576);
//   tandem::dequantize_row(t.type, t.data, row.data(), 576);   // one row of a tensor_info
//
// The scalar conversions are exact, need no F16C and are constexpr, so fast kernels can
// inline them and tests can static_assert them. Everything here is the reference that
// optimized kernels are checked against.
#include <bit>
#include <cstdint>

#include "tandem/dtype.hpp"

namespace tandem {

inline constexpr int64_t ggml_block_elems = 32;

struct block_q4_0 {
  uint16_t d;       // fp16 scale
  uint8_t qs[16];   // 32 nibbles, see the order above
};
struct block_q4_1 {
  uint16_t d;       // fp16 scale
  uint16_t m;       // fp16 minimum
  uint8_t qs[16];
};
struct block_q8_0 {
  uint16_t d;       // fp16 scale
  int8_t qs[32];
};
static_assert(sizeof(block_q4_0) == 18 && alignof(block_q4_0) == 2);
static_assert(sizeof(block_q4_1) == 20 && alignof(block_q4_1) == 2);
static_assert(sizeof(block_q8_0) == 34 && alignof(block_q8_0) == 2);
static_assert(traits(dtype::q4_0).block_bytes == sizeof(block_q4_0));
static_assert(traits(dtype::q4_1).block_bytes == sizeof(block_q4_1));
static_assert(traits(dtype::q8_0).block_bytes == sizeof(block_q8_0));

// IEEE binary16 bits -> float. Exact for every input, NaN payloads kept.
constexpr float fp16_to_fp32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f) return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal: shift the leading one into the implicit position.
    exp = 113;  // 127 - 14
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --exp;
    }
    return std::bit_cast<float>(sign | (exp << 23) | ((mant & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112) << 23) | (mant << 13));
}

// float -> binary16 bits, round to nearest even; overflow gives inf, NaN stays NaN (quiet).
constexpr uint16_t fp32_to_fp16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  uint32_t abs = x & 0x7fffffffu;
  if (abs > 0x7f800000u) return sign | 0x7e00u | static_cast<uint16_t>((abs >> 13) & 0x1ffu);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds past 65504
  if (abs >= 0x38800000u) {                        // normal half (>= 2^-14)
    abs += 0xfffu + ((abs >> 13) & 1u);
    return sign | static_cast<uint16_t>((abs - 0x38000000u) >> 13);
  }
  const uint32_t exp = abs >> 23;
  if (exp < 102) return sign;  // below half the smallest subnormal (ties go to even 0)
  // Subnormal half: value / 2^-24 = mant * 2^(exp - 126), rounded to nearest even.
  const uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
  const uint32_t shift = 126 - exp;  // 14..24
  uint32_t q = mant >> shift;
  const uint32_t rem = mant & ((1u << shift) - 1);
  const uint32_t half = 1u << (shift - 1);
  if (rem > half || (rem == half && (q & 1u))) ++q;
  return sign | static_cast<uint16_t>(q);
}

// bfloat16 bits -> float: the top half of a float. Exact.
constexpr float bf16_to_fp32(uint16_t b) {
  return std::bit_cast<float>(static_cast<uint32_t>(b) << 16);
}

// float -> bfloat16 bits, round to nearest even; NaN stays NaN (quiet).
constexpr uint16_t fp32_to_bf16(float f) {
  const uint32_t x = std::bit_cast<uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  return static_cast<uint16_t>((x + 0x7fffu + ((x >> 16) & 1u)) >> 16);
}

// Dequantizes `n` consecutive elements starting at a block boundary. For quantized
// types n must be a multiple of 32; f32/f16/bf16 take any n >= 0. Throws tandem::error
// for other dtypes (integers are not weights) or a bad n.
void dequantize_row(dtype t, const void* src, float* dst, int64_t n);

// Per-format kernels behind dequantize_row; n is a multiple of 32 (unchecked).
void dequantize_row_q4_0(const block_q4_0* src, float* dst, int64_t n);
void dequantize_row_q4_1(const block_q4_1* src, float* dst, int64_t n);
void dequantize_row_q8_0(const block_q8_0* src, float* dst, int64_t n);

// Reference quantizers (ggml's *_ref rounding). n must be a multiple of 32, else
// tandem::error. `dst` receives n / 32 blocks.
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);

}  // namespace tandem
