#include "tandem_exl3/hadamard.hpp"

#include <stdexcept>
#include <string>

#include "tandem_exl3/codebook.hpp"

namespace tandem::exl3 {
namespace {

void check_chunks(int64_t n) {
  if (n < 0 || n % hadamard_size != 0)
    throw std::invalid_argument("exl3: Hadamard length " + std::to_string(n) +
                                " is not a multiple of 128");
}

}  // namespace

// A float -> double -> half conversion rounds once: every float is exact in double.
uint16_t f32_to_f16(float v) { return double_to_half(static_cast<double>(v)); }
float f16_to_f32(uint16_t h) { return static_cast<float>(half_to_double(h)); }
// The product / sum of two halves is exact in double (22 significant bits, or an exponent
// gap that double absorbs), so rounding it to half is the single rounding the GPU does.
uint16_t f16_mul(uint16_t a, uint16_t b) { return double_to_half(half_to_double(a) * half_to_double(b)); }
uint16_t f16_add(uint16_t a, uint16_t b) { return double_to_half(half_to_double(a) + half_to_double(b)); }

void butterflies128(float* x) {
  for (int h = 1; h < hadamard_size; h <<= 1) {
    for (int i = 0; i < hadamard_size; ++i) {
      if (i & h) continue;
      const float lo = x[i], up = x[i | h];
      x[i] = lo + up;
      x[i | h] = lo - up;
    }
  }
}

void hadamard128(float* x, int64_t n, float scale) {
  check_chunks(n);
  for (int64_t c = 0; c < n; c += hadamard_size) {
    butterflies128(x + c);
    if (scale != 1.0f)
      for (int i = 0; i < hadamard_size; ++i) x[c + i] *= scale;
  }
}

void hadamard128_input_gpu(const uint16_t* x, const uint16_t* suh, int64_t n, uint16_t* out) {
  check_chunks(n);
  float v[hadamard_size];
  for (int64_t c = 0; c < n; c += hadamard_size) {
    for (int i = 0; i < hadamard_size; ++i)
      v[i] = f16_to_f32(suh ? f16_mul(x[c + i], suh[c + i]) : x[c + i]);
    butterflies128(v);
    for (int i = 0; i < hadamard_size; ++i) out[c + i] = f32_to_f16(v[i] * hadamard_scale);
  }
}

void hadamard128_output_gpu(const float* acc, const uint16_t* svh, int64_t n, uint16_t* out) {
  check_chunks(n);
  float v[hadamard_size];
  for (int64_t c = 0; c < n; c += hadamard_size) {
    for (int i = 0; i < hadamard_size; ++i) v[i] = acc[c + i];
    butterflies128(v);
    for (int i = 0; i < hadamard_size; ++i) {
      const uint16_t h = f32_to_f16(v[i] * hadamard_scale);
      out[c + i] = svh ? f16_mul(h, svh[c + i]) : h;
    }
  }
}

}  // namespace tandem::exl3
