#pragma once
// The 128-point Hadamard rotations of EXL3 (spec §4): H[i][j] = (-1)^popcount(i&j) / sqrt(128),
// natural (Sylvester) order, applied to every contiguous 128-element chunk of a vector.
// H is symmetric and orthogonal, so it is its own inverse.
//
//   tandem::exl3::hadamard128(v.data(), v.size());                  // f32, normalized
//   tandem::exl3::hadamard128_input_gpu(x, suh, k, xh);              // as exllamav3's kernel rounds
#include <cstdint>

namespace tandem::exl3 {

inline constexpr int hadamard_size = 128;
// The kernels' 1/sqrt(128), as written there (rounds to the float nearest 1/sqrt(128)).
inline constexpr float hadamard_scale = 0.088388347648f;

// Unnormalized butterflies over one 128-chunk in f32, in the GPU kernel's order: index
// bits 0 and 1 (the lane's 4 registers), then bits 2..6 (the shuffle stages); at each
// stage the lower partner becomes lower + upper and the upper lower - upper.
void butterflies128(float* x);

// Plain f32: x[i*128 .. i*128+127] <- H x for every chunk; n must be a multiple of 128
// (std::invalid_argument otherwise). `scale` replaces 1/sqrt(128) (1 for the raw sums).
void hadamard128(float* x, int64_t n, float scale = hadamard_scale);

// The input side exactly as exllamav3 rounds (had_hf_r_128_inner with pre-scale):
// v = fp16(x (.) suh) as one fp16 multiply, butterflies in f32, times hadamard_scale in
// f32, rounded to fp16. x, suh, out: fp16 bits, n elements (a multiple of 128);
// suh may be null (no pre-scale).
void hadamard128_input_gpu(const uint16_t* x, const uint16_t* suh, int64_t n, uint16_t* out);

// The output side of the fp16-output epilogue: f32 accumulators through the butterflies,
// times hadamard_scale in f32, rounded to fp16, then one fp16 multiply by svh (may be
// null). The spec does not fix the epilogue's butterfly order; this uses the input
// side's order, so this side agrees with the GPU to fp16 rounding, not bit for bit.
void hadamard128_output_gpu(const float* acc, const uint16_t* svh, int64_t n, uint16_t* out);

// fp16 helpers with one round-to-nearest-even each, as the GPU's __float2half_rn, __hmul,
// __hadd do.
uint16_t f32_to_f16(float v);
float f16_to_f32(uint16_t h);
uint16_t f16_mul(uint16_t a, uint16_t b);
uint16_t f16_add(uint16_t a, uint16_t b);

}  // namespace tandem::exl3
