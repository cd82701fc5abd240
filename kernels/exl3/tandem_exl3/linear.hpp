#pragma once
// One EXL3 linear layer on the CPU: the rotated weight Ŵ, the original-basis weight W, and
// the reference product, all from the stored tensors (spec §2.1, §4).
//
//   W (k x n) = diag(suh) · Hb_k · Ŵ · Hb_n · diag(svh),   y = x·W + bias
//
//   tandem::exl3::exl3_matrix m{4, codebook::mul1, k, n, trellis, suh, svh, nullptr};
//   std::vector<float> W(k * n);
//   tandem::exl3::reconstruct_f32(m, W.data());             // original basis, f32
//   tandem::exl3::linear_ref(m, x, rows, y);                // rotated path, GPU rounding
//
// k is the input (row) dimension, n the output (column) dimension, both padded to
// multiples of 128 as stored; callers zero-extend x and ignore y's padding columns.
#include <cstdint>

#include "tandem_exl3/codebook.hpp"

namespace tandem::exl3 {

struct exl3_matrix {
  int K = 0;                           // bits per weight, 1..8
  codebook cb = codebook::mul1;
  int64_t k = 0, n = 0;                // padded: multiples of 128
  const uint16_t* trellis = nullptr;   // int16 [k/16][n/16][16K]
  const uint16_t* suh = nullptr;       // fp16 [k]
  const uint16_t* svh = nullptr;       // fp16 [n]
  const uint16_t* bias = nullptr;      // fp16 [n], or null
};

// Throws std::invalid_argument for K outside 1..8, dimensions that are not positive
// multiples of 128, or a missing trellis / suh / svh.
void validate(const exl3_matrix& m);

// Ŵ as fp16 bits, row-major [k][n].
void decode_rotated(const exl3_matrix& m, uint16_t* w_hat);

// W in the original basis, f32 row-major [k][n]: Ŵ decoded, rotated along n then along k
// with f32 butterflies (×1/sqrt(128) each), then scaled by suh (rows) and svh (columns).
void reconstruct_f32(const exl3_matrix& m, float* W);
// Rows [k0, k1) of W only (multiples of 128), into W_rows [k1-k0][n]; lets callers split
// the work into independent 128-row bands.
void reconstruct_f32_rows(const exl3_matrix& m, int64_t k0, int64_t k1, float* W_rows);

enum class rounding : uint8_t {
  // Mirrors the fp16 GPU path (spec §4): x rounded to fp16; x·suh one fp16 multiply;
  // input butterflies in f32, ×1/sqrt(128) in f32, rounded to fp16; fp16 × fp16 products
  // accumulated in f32 (sequentially over k; the tensor cores' order differs, which moves
  // only the last f32 bits); output butterflies in f32, ×1/sqrt(128), rounded to fp16;
  // ×svh one fp16 multiply; +bias one fp16 add. The result is an fp16 value as a float.
  gpu,
  // The same order of operations with no fp16 rounding anywhere (f32 throughout).
  none,
};

// y = x·W + bias computed in the rotated space, never forming W. x: f32 [m][k]; y: f32
// [m][n]. Only columns [n_begin, n_end) of y are written (multiples of 128; n_end < 0 =
// n), so callers may split the columns across threads.
void linear_ref(const exl3_matrix& mat, const float* x, int64_t m, float* y,
                rounding r = rounding::gpu, int64_t n_begin = 0, int64_t n_end = -1);

}  // namespace tandem::exl3
