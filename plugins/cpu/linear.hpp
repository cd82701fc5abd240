#pragma once
// The CPU linear: y = x W^T, split over the pool by output rows.
//
// Accepted weight dtypes: q4_0, q4_1, q8_0 (activations quantized to q8 blocks once per
// call, integer dots), f32 and f16 (float dots). bf16 weights are widened to f32 when
// loaded (see cpu_backend::load_linear).
#include <vector>

#include "cpu_weights.hpp"
#include "kernels.hpp"
#include "thread_pool.hpp"
#include "views.hpp"

namespace tandem::cpu {

// Reusable scratch for the quantized activations; one per backend (single caller).
struct linear_scratch {
  std::vector<q8_block> q8;
};

// x: [n, in] -> y: [n, out]; y must not alias x. With float_dots, quantized weights are
// dequantized row by row and multiplied in f32 (the exact path, for reference checks).
void run_linear(const cpu_linear& w, const rows_view& x, const rows_view& y,
                const kernel_table& k, thread_pool& pool, linear_scratch& scratch,
                bool float_dots = false);

}  // namespace tandem::cpu
