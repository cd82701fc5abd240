#pragma once
// The descriptor behind a tensor_info of dtype::exl3: one EXL3 (exllamav3) quantized linear.
// Plain data; the arrays live in the weight_format (mmap'ed safetensors) for its lifetime.
//
//   if (const exl3_tensor* e = exl3_tensor::of(t.type, t.data, t.nbytes)) {
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

namespace tandem {

struct exl3_tensor {
  static constexpr uint32_t magic_value = 0x334c5845;  // "EXL3": guards against a wrong cast

  uint32_t magic = magic_value;
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

  // The descriptor a tensor's data points at, or nullptr when it is not an exl3 tensor.
  static const exl3_tensor* of(dtype type, const void* data, size_t nbytes) {
    if (type != dtype::exl3 || data == nullptr || nbytes != sizeof(exl3_tensor)) return nullptr;
    const auto* e = static_cast<const exl3_tensor*>(data);
    return e->magic == magic_value ? e : nullptr;
  }
};

}  // namespace tandem
