#pragma once
// The CPU's inner kernels, one table per instruction set, picked at run time.
//
// Quantized linears follow llama.cpp: the activation row is quantized once to q8 blocks,
// then each weight row is an integer dot product against it, scaled per block. Each dot
// kernel handles a tile of up to `max_tile` activation rows, so a weight row is unpacked
// once per tile instead of once per activation row.
//
// Tables: scalar (any CPU), avx2 (AVX2 + FMA + F16C), avx512 (avx2 plus AVX512-VNNI
// integer dots). The files that define them are compiled with #pragma GCC target, so the
// library runs on every x86-64 and uses what the CPU has.
#include <cstdint>
#include <string_view>

namespace tandem::cpu {

inline constexpr int max_tile = 4;

// One block of 32 activations: x ~= d * qs, with s = d * sum(qs) for the Q4 offsets.
// qs stays within [-127, 127] (the sign trick of the Q8_0 kernels needs no -128).
struct q8_block {
  float d;
  float s;
  int8_t qs[32];
};

struct kernel_table {
  std::string_view name;
  // x: n floats (n a multiple of 32) -> n / 32 blocks.
  void (*quantize_q8)(const float* x, q8_block* out, int64_t n);
  // out[r] = dot(weight row w of nb GGML blocks, activations a + r * a_stride), r < rows.
  void (*dot_q4_0)(const void* w, const q8_block* a, int64_t a_stride, int rows, int64_t nb,
                   float* out);
  void (*dot_q4_1)(const void* w, const q8_block* a, int64_t a_stride, int rows, int64_t nb,
                   float* out);
  void (*dot_q8_0)(const void* w, const q8_block* a, int64_t a_stride, int rows, int64_t nb,
                   float* out);
  // out[r] = dot(w, x + r * x_stride) over n elements, for f32 and f16 weight rows.
  void (*dot_f32)(const float* w, const float* x, int64_t x_stride, int rows, int64_t n,
                  float* out);
  void (*dot_f16)(const uint16_t* w, const float* x, int64_t x_stride, int rows, int64_t n,
                  float* out);
  float (*dot)(const float* a, const float* b, int64_t n);
  void (*axpy)(float* y, float a, const float* x, int64_t n);  // y += a * x
  void (*scale)(float* y, float a, int64_t n);                 // y *= a
};

const kernel_table& scalar_kernels();
const kernel_table& avx2_kernels();    // only call when the CPU has AVX2, FMA and F16C
const kernel_table& avx512_kernels();  // ... and AVX512F/BW/VL/VNNI

// The best table this CPU supports; "scalar", "avx2" or "avx512" forces one (tests).
const kernel_table& best_kernels();
const kernel_table* kernels_by_name(std::string_view name);  // nullptr if unsupported here

}  // namespace tandem::cpu
