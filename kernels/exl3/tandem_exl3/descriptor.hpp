#pragma once
// The checks every backend makes before it loads an EXL3 linear (a tensor_info of dtype
// exl3 whose data is a tandem::exl3_tensor descriptor): the descriptor is there, its
// codebook, shapes and out_perm are in range, and the trellis matrix validates.
// Header-only on purpose: tandem_exl3 itself has no dependency on the core library.
//
//   const exl3_tensor& e = tandem::exl3::checked_descriptor(w, "backend.cuda");
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

#include "tandem/error.hpp"
#include "tandem/exl3_tensor.hpp"
#include "tandem/weight_format.hpp"
#include "tandem_exl3/linear.hpp"

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

}  // namespace tandem::exl3
