#pragma once
// EXL3's procedural codebooks: a 16-bit trellis state becomes one fp16 weight (of the
// rotated matrix) through a few integer and fp16 operations. Bit-exact with exllamav3's
// kernels (quant/exl3_dq.cuh): each codebook rounds exactly once, to nearest even, as the
// GPU's __hadd / __hfma do. See ../shared/research/exl3.md §3.3 for the constants.
//
//   uint16_t h = tandem::exl3::decode_bits(tandem::exl3::codebook::mul1, 0x0123);  // 0xB4CB
//   float w = tandem::exl3::decode(tandem::exl3::codebook::mul1, 0x0123);          // -0.29956
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <optional>
#include <string_view>

namespace tandem::exl3 {

// Which codebook a tensor uses: the `mcg` / `mul1` marker tensors select the last two;
// neither marker means 3INST (exllamav3's default before v0.0.9).
enum class codebook : uint8_t { inst3, mcg, mul1 };

constexpr std::string_view name(codebook c) {
  switch (c) {
    case codebook::inst3: return "3inst";
    case codebook::mcg: return "mcg";
    case codebook::mul1: return "mul1";
  }
  return "?";
}
inline std::optional<codebook> parse_codebook(std::string_view s) {
  if (s == "3inst") return codebook::inst3;
  if (s == "mcg") return codebook::mcg;
  if (s == "mul1") return codebook::mul1;
  return std::nullopt;
}

inline constexpr uint32_t mcg_multiplier = 0xCBAC1FEDu;
inline constexpr uint32_t mul1_multiplier = 0x83DCD12Du;
// MUL1's affine map, fp16 bits: value = (1024 + byte sum) * k_inv + k_bias, one rounding.
inline constexpr uint16_t mul1_k_inv_bits = 0x1EEE, mul1_k_bias_bits = 0xC931;

// fp16 <-> double. to_half rounds to nearest even with subnormals, overflow to inf.
inline double half_to_double(uint16_t h) {
  const int sign = h >> 15, exp = (h >> 10) & 0x1f, man = h & 0x3ff;
  double v;
  if (exp == 0) v = std::ldexp(static_cast<double>(man), -24);
  else if (exp == 31) v = man ? NAN : INFINITY;
  else v = std::ldexp(static_cast<double>(man | 0x400), exp - 25);
  return sign ? -v : v;
}

inline uint16_t double_to_half(double v) {
  uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  v = std::fabs(v);
  if (std::isnan(v)) return 0x7e00;
  if (v >= 65520.0) return sign | 0x7c00;  // rounds to inf
  int e = 0;
  std::frexp(v, &e);  // v = f * 2^e, f in [0.5, 1)
  // Units of the last place: 2^(e-11) for normals, 2^-24 for subnormals.
  const int ulp_exp = std::max(e - 11, -24);
  const double q = std::ldexp(v, -ulp_exp);  // exact: a power-of-two scale
  double r = std::nearbyint(q);              // default rounding mode: to nearest even
  // r * 2^ulp_exp is the rounded value; re-encode it (r may have carried into a new binade).
  const double rv = std::ldexp(r, ulp_exp);
  if (rv == 0.0) return sign;
  if (rv >= 65520.0) return sign | 0x7c00;
  int re = 0;
  std::frexp(rv, &re);
  if (re - 1 < -14) return sign | static_cast<uint16_t>(std::ldexp(rv, 24));  // subnormal
  const auto man = static_cast<uint16_t>(std::ldexp(rv, 11 - re) - 1024.0);
  return sign | static_cast<uint16_t>((re - 1 + 15) << 10) | man;
}

// The fp16 bits of state `s` (its low 16 bits are used) under codebook `cb`.
inline uint16_t decode_bits(codebook cb, uint32_t s) {
  s &= 0xffffu;
  if (cb == codebook::mul1) {
    const uint32_t x = s * mul1_multiplier;
    const uint32_t bs = (x & 0xff) + ((x >> 8) & 0xff) + ((x >> 16) & 0xff) + (x >> 24);
    // (1024 + bs) * k_inv + k_bias with one rounding (__hfma); exact in double.
    const double k_inv = half_to_double(mul1_k_inv_bits), k_bias = half_to_double(mul1_k_bias_bits);
    return double_to_half((1024.0 + bs) * k_inv + k_bias);
  }
  uint32_t x = cb == codebook::inst3 ? s * 89226354u + 64248484u : s * mcg_multiplier;
  x = (x & 0x8FFF8FFFu) ^ 0x3B603B60u;
  // Both halves lie in [0.125, 2) in magnitude, so their sum is exact in double.
  return double_to_half(half_to_double(static_cast<uint16_t>(x & 0xffff)) +
                        half_to_double(static_cast<uint16_t>(x >> 16)));
}

inline float decode(codebook cb, uint32_t s) { return static_cast<float>(half_to_double(decode_bits(cb, s))); }

}  // namespace tandem::exl3
