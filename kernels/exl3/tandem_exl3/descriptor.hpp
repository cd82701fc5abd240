#pragma once
// The checks every backend makes before it loads an EXL3 linear (an opaque tensor_info
// whose data is an exl3_tensor descriptor, tensor.hpp): the descriptor is there, its
// codebook, shapes and out_perm are in range, and the trellis matrix validates.
// Header-only on purpose: tandem_exl3 itself has no dependency on the core library.
//
//   const exl3_tensor& e = tandem::exl3::checked_descriptor(w, "backend.cuda");
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/error.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_exl3/linear.hpp"
#include "tandem_exl3/tensor.hpp"

namespace tandem::exl3 {

inline exl3_matrix matrix_of(const exl3_tensor& e) {
  return {e.bits, static_cast<codebook>(e.codebook), e.k, e.n, e.trellis, e.suh, e.svh, e.bias};
}

// tandem::error naming `who` and the tensor for anything wrong.
inline const exl3_tensor& checked_descriptor(const tensor_info& w, std::string_view who) {
  auto fail = [&](const std::string& what) {
    throw error(std::string(who) + ": EXL3 tensor '" + w.name + "' " + what);
  };
  const exl3_tensor* e = exl3_tensor::of(w.type, w.data, w.nbytes);
  if (e == nullptr) fail("has no exl3_tensor descriptor");
  if (e->codebook > 2) fail("has codebook " + std::to_string(e->codebook) + " (0..2)");
  if (w.shape != std::vector<int64_t>{e->out_features, e->in_features} || e->in_features > e->k ||
      e->out_features > e->n || e->in_features <= 0 || e->out_features <= 0)
    fail("has a shape that does not match its descriptor");
  try {
    validate(matrix_of(*e));
  } catch (const std::invalid_argument& x) {
    fail(x.what());
  }
  if (e->out_perm)
    for (int64_t o = 0; o < e->out_features; ++o)
      if (e->out_perm[o] < 0 || e->out_perm[o] >= e->out_features) fail("has an out_perm entry out of range");
  return *e;
}

// W of the unpadded linear `e` as f32 rows [out_features][in_features] into `w` (the layout
// of a plain {out, in} weight; out_perm applied, padding dropped). The trellis is decoded in
// 128-input-row bands: `for_each_band(count, fn)` calls fn(b) for every b in [0, count), in
// any order or in parallel (a thread pool's parallel_for, or a plain loop).
template <class ForEachBand>
void unpadded_rows_f32(const exl3_tensor& e, float* w, ForEachBand&& for_each_band) {
  const exl3_matrix m = matrix_of(e);
  std::vector<float> W(static_cast<size_t>(m.k * m.n));  // [k][n], original basis
  for_each_band(m.k / 128, [&](int64_t b) { reconstruct_f32_rows(m, b * 128, b * 128 + 128, W.data() + b * 128 * m.n); });
  const int64_t in = e.in_features;
  for_each_band(e.out_features, [&](int64_t o) {
    const int64_t col = e.out_perm ? e.out_perm[o] : o;
    for (int64_t i = 0; i < in; ++i) w[o * in + i] = W[i * m.n + col];
  });
}

}  // namespace tandem::exl3
