#pragma once
// Checks of the tensor_view arguments of backend ops, and the row view the kernels use.
// Every failure is a tandem::error naming the op and the argument.
#include <cstdint>

#include "tandem/tensor_view.hpp"

namespace tandem::cpu {

// A 2-D f32 view: `rows` rows of `cols` contiguous floats, `stride` floats apart. A view
// of more dims collapses to [shape[0], product of the rest], which must be contiguous
// (so q, k and v may be column slices of one fused projection).
struct rows_view {
  float* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  float* row(int64_t i) const { return data + i * stride; }
};

rows_view f32_rows(const tensor_view& v, const char* op, const char* arg);

// The same for i32 index matrices (ids and top-k positions [n, k]).
struct i32_rows_view {
  int32_t* data = nullptr;
  int64_t rows = 0;
  int64_t cols = 0;
  int64_t stride = 0;

  int32_t* row(int64_t i) const { return data + i * stride; }
};

i32_rows_view i32_rows(const tensor_view& v, const char* op, const char* arg);

// True when an optional view argument is given (has a shape or data).
inline bool given(const tensor_view& v) { return v.ndim > 0 || v.data != nullptr; }

// An f32 host vector of exactly `n` elements, contiguous (norm weights).
const float* f32_vector(const tensor_view& v, int64_t n, const char* op, const char* arg);

// An i32 host vector of exactly `n` elements, contiguous.
const int32_t* i32_vector(const tensor_view& v, int64_t n, const char* op, const char* arg);

// Throws unless a and b have the same rows and cols.
void check_same_shape(const rows_view& a, const rows_view& b, const char* op, const char* arg);

}  // namespace tandem::cpu
