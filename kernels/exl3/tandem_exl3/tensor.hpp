#pragma once
// The descriptor behind an EXL3 tensor_info: one EXL3 (exllamav3) quantized linear, as
// weights.exl3 hands it out. For the core it is a dtype::opaque tensor whose descriptor's
// format tag is "EXL3" (tandem/dtype.hpp); only the EXL3 weights, kernels and the backends
// and models that load them know what is behind it. Plain data; the arrays live in the
// weight_format (mmap'ed safetensors) for its lifetime. Header-only.
//
//   if (const exl3::exl3_tensor* e = exl3::exl3_tensor::of(t.type, t.data, t.nbytes)) {
//     // e->trellis, e->suh, e->svh; K = e->bits; y[i] = (x·W)[e->out_perm ? e->out_perm[i] : i]
//   }
//
// The stored matrix is W (in_features x out_features, y = x·W + bias) padded to k x n,
// multiples of 128:  W = diag(suh) · Hb_k · Ŵ · Hb_n · diag(svh), where Ŵ is coded in 16x16
// trellis tiles of `bits` bits per weight (shared/research/exl3.md §2-4). tensor_info's
// shape stays {out_features, in_features}, the unpadded linear shape.
#include <cstddef>
#include <cstdint>

#include "tandem/dtype.hpp"

namespace tandem::exl3 {

struct exl3_tensor {
  // dtype::opaque's format tag: the first field, so opaque_tag reads it (0x334c5845).
  static constexpr uint32_t tag_value = fourcc("EXL3");

  uint32_t tag = tag_value;
  int32_t bits = 0;                 // K: bits per weight, 1..8
  uint8_t codebook = 0;             // 0 = 3inst, 1 = mcg, 2 = mul1
  int64_t in_features = 0;          // unpadded
  int64_t out_features = 0;
  int64_t k = 0;                    // padded in_features
  int64_t n = 0;                    // padded out_features
  const uint16_t* trellis = nullptr;  // int16 [k/16][n/16][16*bits]
  const uint16_t* suh = nullptr;      // fp16 [k]
  const uint16_t* svh = nullptr;      // fp16 [n]
  const uint16_t* bias = nullptr;     // fp16 [n], or null
  // Output order: output i of this linear is column out_perm[i] of W; null = identity.
  // (weights.exl3 uses it to give q/k projections GGUF's rotary row order.)
  const int32_t* out_perm = nullptr;  // [out_features]

  // The dtype of a tensor_info whose data is an exl3_tensor.
  static constexpr dtype type = dtype::opaque;

  // Whether a tensor claims to be EXL3: opaque, tagged "EXL3" (the descriptor may still be
  // malformed; of() also checks its size).
  static bool tagged(dtype t, const void* data, size_t nbytes) { return opaque_tag(t, data, nbytes) == tag_value; }

  // The descriptor a tensor's data points at, or nullptr when it is not an EXL3 tensor.
  static const exl3_tensor* of(dtype t, const void* data, size_t nbytes) {
    if (nbytes != sizeof(exl3_tensor) || !tagged(t, data, nbytes)) return nullptr;
    return static_cast<const exl3_tensor*>(data);
  }
};

static_assert(exl3_tensor::tag_value == 0x334c5845, "the tag reads \"EXL3\" in memory");
static_assert(offsetof(exl3_tensor, tag) == 0, "opaque_tag reads the first field");

}  // namespace tandem::exl3
