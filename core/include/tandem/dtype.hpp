#pragma once
// Element types of tensors that cross plugin seams.
//
// Float and integer types hold one element each. Block-quantized types (GGML layout)
// pack `block_elems` elements into `block_bytes` bytes along the innermost dimension.
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>

namespace tandem {

enum class dtype : uint8_t {
  f32, f16, bf16, i32, i64, u8,
  q4_0, q4_1, q8_0,  // GGML block formats, 32 elements per block
  exl3,              // EXL3 trellis: `data` is a tandem::exl3_tensor descriptor (exl3_tensor.hpp)
  fp8_e4m3,          // OCP FP8 E4M3 (max 448, no infinities): a KV cache element type
};

struct dtype_traits {
  std::string_view name;
  int64_t block_elems;  // elements per block (1 for plain types)
  int64_t block_bytes;  // bytes per block
};

constexpr dtype_traits traits(dtype t) {
  switch (t) {
    case dtype::f32:  return {"f32", 1, 4};
    case dtype::f16:  return {"f16", 1, 2};
    case dtype::bf16: return {"bf16", 1, 2};
    case dtype::i32:  return {"i32", 1, 4};
    case dtype::i64:  return {"i64", 1, 8};
    case dtype::u8:   return {"u8", 1, 1};
    case dtype::q4_0: return {"q4_0", 32, 18};
    case dtype::q4_1: return {"q4_1", 32, 20};
    case dtype::q8_0: return {"q8_0", 32, 34};
    case dtype::exl3: return {"exl3", 1, 0};  // no byte layout: see row_bytes
    case dtype::fp8_e4m3: return {"fp8_e4m3", 1, 1};
  }
  return {"?", 1, 1};
}

constexpr std::string_view name(dtype t) { return traits(t).name; }
constexpr bool is_quantized(dtype t) { return t == dtype::exl3 || traits(t).block_elems > 1; }

// Bytes of one row of `n` elements; nullopt when n is not a multiple of the block size
// or the size does not fit in int64, and always for exl3 (its rows are not byte ranges).
constexpr std::optional<int64_t> row_bytes(dtype t, int64_t n) {
  if (t == dtype::exl3) return std::nullopt;
  auto tr = traits(t);
  if (n < 0 || n % tr.block_elems != 0) return std::nullopt;
  if (n / tr.block_elems > INT64_MAX / tr.block_bytes) return std::nullopt;  // would overflow
  return n / tr.block_elems * tr.block_bytes;
}

}  // namespace tandem
